"""Benchmark runs in the API (POST/GET /api/v1/services/<name>/benchmarks, every bad field of
a run named) and the service's tokenizer when no node can be asked (GET .../tokenizer: a
model-store model from the API host's store, never a file outside it; tests/test_node_tokenizer.py
has it read on the nodes), against the configured database."""

from __future__ import annotations

import copy
import json
import math

import pytest
from rest_framework.test import APIClient

from controlplane.benchmarks import validation
from controlplane.benchmarks.api import runs
from controlplane.benchmarks.models import BenchmarkRun
from controlplane.services.models import Service
from controlplane.services.tiny_model import write_tiny_model
from tests.api_support import default_workspace

FIGURES = {name: 1.5 for name in validation.FIGURES} | {
    "requests": 10, "failed": 0, "token_mismatches": 0, "ttft_ms_p50": None,
}  # fmt: skip
STATIC_ROW = {"parallel_num": 4, "prompt_tokens": 1024, "output_tokens": 128, **FIGURES}
DYNAMIC_ROW = {"request_rate": 2.5, "num_prompts": 100, **FIGURES}
STATIC = {"kind": "static", "parameters": {"parallel_num": [1, 4], "epochs": 5, "model": "m",
                                           "max_tokens": None}, "rows": [STATIC_ROW]}  # fmt: skip
DYNAMIC = {"kind": "dynamic", "parameters": {"dataset_type": "custom"}, "rows": [DYNAMIC_ROW]}


def changed(body: dict, path: str, value) -> dict:
    """A deep copy of body with `path` (dotted; a number is a list index) set, or removed
    when value is `...`."""
    body = copy.deepcopy(body)
    *parents, last = path.split(".")
    node = body
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is ...:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return body


# ---- the body, checked (pure) ----------------------------------------------------------------


@pytest.mark.parametrize("body", [STATIC, DYNAMIC])
def test_a_well_formed_run_is_taken_as_sent(body):
    run = validation.parse_run(body)
    assert (run.kind, run.parameters, run.rows) == (body["kind"], body["parameters"], body["rows"])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        ({**STATIC, "note": "x"}, "note"),
        (changed(STATIC, "kind", "burst"), "kind"),
        (changed(STATIC, "rows", []), "rows"),
        (changed(STATIC, "rows", [STATIC_ROW] * (validation.MAX_ROWS + 1)), "rows"),
        (changed(STATIC, "rows.0", "row"), "rows[0]"),
        (changed(STATIC, "rows.0.ttft_ms_p90", ...), "rows[0].ttft_ms_p90"),
        (changed(STATIC, "rows.0.ttft_ms_p90", "12"), "rows[0].ttft_ms_p90"),
        (changed(STATIC, "rows.0.ttft_ms_p90", -1), "rows[0].ttft_ms_p90"),
        (changed(STATIC, "rows.0.ttft_ms_p90", math.inf), "rows[0].ttft_ms_p90"),
        (changed(STATIC, "rows.0.duration_s", None), "rows[0].duration_s"),
        (changed(STATIC, "rows.0.requests", 2.5), "rows[0].requests"),
        (changed(STATIC, "rows.0.requests", True), "rows[0].requests"),
        (changed(STATIC, "rows.0.parallel_num", 0), "rows[0].parallel_num"),
        (changed(STATIC, "rows.0.request_rate", 1), "rows[0].request_rate"),
        (changed(DYNAMIC, "rows.0.request_rate", 0), "rows[0].request_rate"),
        (changed(DYNAMIC, "rows.0.num_prompts", ...), "rows[0].num_prompts"),
        (changed(STATIC, "parameters", [1]), "parameters"),
        (changed(STATIC, "parameters.Bad-Name", 1), "parameters"),
        (changed(STATIC, "parameters.epochs", {"nested": 1}), "parameters.epochs"),
        (changed(STATIC, "parameters.epochs", list(range(101))), "parameters.epochs"),
        (changed(STATIC, "parameters.model", "x" * 501), "parameters.model"),
        (changed(STATIC, "parameters.model", "a\x00b"), "parameters.model"),
    ],
)
def test_every_bad_field_of_a_run_is_named(body, field):
    with pytest.raises(validation.InvalidRunError) as refused:
        validation.parse_run(body)
    assert field in refused.value.errors


def test_a_body_full_of_errors_names_a_bounded_number_of_them():
    rows = [{"nonsense": i} for i in range(400)]
    with pytest.raises(validation.InvalidRunError) as refused:
        validation.parse_run({"kind": "static", "parameters": {}, "rows": rows})
    assert len(refused.value.errors) == validation.MAX_ERRORS


# ---- the API ---------------------------------------------------------------------------------


@pytest.fixture
def service(db):
    spec = {"name": "svc", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}
    return Service.objects.create(workspace=default_workspace(), name="svc", spec=spec)


URL = "/api/v1/services/svc/benchmarks"


def test_a_posted_run_is_stored_with_who_ran_it_and_listed_newest_first(api, service):
    first = api.post(URL, STATIC, format="json")
    assert first.status_code == 201, first.json()
    second = api.post(URL, DYNAMIC, format="json")
    listed = api.get(URL).json()
    assert [r["id"] for r in listed] == [second.json()["id"], first.json()["id"]]
    assert listed[1] | {"created_at": None} == {
        "id": first.json()["id"], "service": "svc", "kind": "static", "created_at": None,
        "created_by": "alice", "parameters": STATIC["parameters"], "rows": STATIC["rows"],
    }  # fmt: skip
    assert [r["kind"] for r in api.get(URL, {"kind": "static"}).json()] == ["static"]
    assert len(api.get(URL, {"limit": "1"}).json()) == 1


def test_a_bad_run_is_a_400_naming_the_fields_and_nothing_is_saved(api, service):
    body = changed(changed(STATIC, "rows.0.ttft_ms_p99", "fast"), "kind", "burst")
    response = api.post(URL, {**body, "extra": 1}, format="json")
    assert response.status_code == 400
    assert {"kind", "extra"} <= set(response.json()["errors"])
    assert "nothing was saved" in response.json()["detail"]
    response = api.post(URL, changed(STATIC, "rows.0.ttft_ms_p99", "fast"), format="json")
    assert set(response.json()["errors"]) == {"rows[0].ttft_ms_p99"}
    assert not BenchmarkRun.objects.exists()


@pytest.mark.parametrize(
    ("query", "field"),
    [({"limit": "0"}, "limit"), ({"limit": "x"}, "limit"), ({"kind": "burst"}, "kind"),
     ({"kinds": "static"}, "kinds")],
)  # fmt: skip
def test_a_bad_list_query_is_a_400_naming_the_parameter(api, service, query, field):
    response = api.get(URL, query)
    assert response.status_code == 400 and field in response.json()["errors"]


def test_runs_of_an_unknown_service_are_a_404(api, db):
    assert api.get("/api/v1/services/nope/benchmarks").status_code == 404
    assert api.post("/api/v1/services/nope/benchmarks", STATIC, format="json").status_code == 404


def test_a_service_being_deleted_takes_no_new_run_but_shows_its_old_ones(api, service):
    api.post(URL, STATIC, format="json")
    Service.objects.filter(pk=service.pk).update(desired_state="deleted")
    assert api.post(URL, STATIC, format="json").status_code == 404
    assert len(api.get(URL).json()) == 1


def test_a_service_keeps_its_newest_runs_only(api, service, monkeypatch):
    monkeypatch.setattr(runs, "MAX_KEPT_RUNS", 3)
    ids = [api.post(URL, STATIC, format="json").json()["id"] for _ in range(5)]
    assert [r["id"] for r in api.get(URL).json()] == ids[:1:-1]
    assert BenchmarkRun.objects.count() == 3


def test_runs_need_a_signed_in_caller(service):
    assert APIClient().get(URL).status_code == 401
    assert APIClient().post(URL, STATIC, format="json").status_code == 401


# ---- the tokenizer ---------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path, settings):
    settings.WHARF_MODEL_DIR = tmp_path / "store"
    write_tiny_model(settings.WHARF_MODEL_DIR / "tiny-llama")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "tokenizer.json").write_text('{"secret": "not in the store"}')
    return settings.WHARF_MODEL_DIR


def serve(name: str, model) -> str:
    llm = {"engine": "vllm-cpu"} | ({"model": model} if model else {})
    Service.objects.create(
        workspace=default_workspace(), name=name, spec={"name": name, "llm": llm}
    )
    return f"/api/v1/services/{name}/tokenizer"


def test_the_tokenizer_of_a_model_store_model_is_served(api, store):
    answer = api.get(serve("svc", "tiny-llama"))
    assert answer.status_code == 200
    files = answer.json()["files"]
    assert files["tokenizer.json"] == (store / "tiny-llama" / "tokenizer.json").read_text()
    assert json.loads(files["tokenizer_config.json"])["bos_token"] == "<|begin_of_text|>"
    assert (answer.json()["model"], answer.json()["node"]) == ("tiny-llama", None)


def test_tokenizer_config_is_optional(api, store):
    (store / "tiny-llama" / "tokenizer_config.json").unlink()
    files = api.get(serve("svc", "tiny-llama")).json()["files"]
    assert set(files) == {"tokenizer.json", "special_tokens_map.json"}


@pytest.mark.parametrize(
    "model",
    ["s3://bucket/models/qwen/", "/mnt/model", None, "not-in-store", "org/also-not"],
)
def test_a_model_not_in_the_store_is_a_404_saying_to_pass_a_tokenizer(api, store, model):
    answer = api.get(serve("svc", model))
    assert answer.status_code == 404 and "--tokenizer" in answer.json()["detail"]


def test_a_model_folder_linking_out_of_the_store_is_not_served(api, store):
    (store / "escape").symlink_to(store.parent / "outside")
    answer = api.get(serve("svc", "escape"))
    assert answer.status_code == 404 and "secret" not in answer.text


def test_a_tokenizer_file_linking_out_of_the_store_is_not_served(api, store):
    folder = store / "linked"
    folder.mkdir()
    (folder / "tokenizer.json").symlink_to(store.parent / "outside" / "tokenizer.json")
    answer = api.get(serve("svc", "linked"))
    assert answer.status_code == 404 and "secret" not in answer.text


def test_a_stored_spec_naming_a_path_up_and_out_is_not_served(api, store):
    # The API refuses such a spec; one written before that rule still must not escape.
    answer = api.get(serve("svc", "../outside"))
    assert answer.status_code == 404 and "secret" not in answer.text


def test_the_tokenizer_of_an_unknown_service_is_a_404(api, store):
    assert api.get("/api/v1/services/nope/tokenizer").status_code == 404


# ---- the published schema --------------------------------------------------------------------


def test_the_benchmark_views_are_described_in_valid_openapi(db):
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.utils import extend_schema_view
    from openapi_spec_validator import validate

    from controlplane import openapi
    from controlplane.benchmarks.api.openapi import describe_benchmark_views

    describe_benchmark_views(extend_schema_view, openapi._op, openapi.ERRORS)
    schema = json.loads(json.dumps(SchemaGenerator().get_schema(public=True), default=str))
    validate(schema)
    runs_path = schema["paths"]["/api/v1/services/{name}/benchmarks"]
    row = runs_path["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(row["properties"]["rows"]["items"]["required"]) == set(validation.FIGURES)
    assert runs_path["get"]["operationId"] == "services_benchmarks_list"
    tokenizer = schema["paths"]["/api/v1/services/{name}/tokenizer"]["get"]
    assert set(tokenizer["responses"]) == {"200", "404", "504"}
