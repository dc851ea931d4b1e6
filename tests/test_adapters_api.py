"""A service's LoRA adapters through the API: listed with where each is loaded, added and
removed as new versions that keep the spec hash (no instance restarts), refused with the field
named, and restored by a rollback."""

from __future__ import annotations

import pytest

from controlplane.services.choices import InstanceState
from controlplane.services.models import Instance, Service
from tests.api_support import grant, published

pytestmark = pytest.mark.django_db

SPEC = {
    "name": "assistant",
    "llm": {"engine": "vllm-cpu", "model": "tiny", "served_model_name": "tiny",
            "lora": {"adapters": [{"name": "sql", "model": "tiny-sql"}], "max_loras": 2}},
}  # fmt: skip
URL = "/api/v1/services/assistant/adapters"


@pytest.fixture
def service(api, store) -> Service:
    grant(platform_buckets=["oss://bucket/adapters"])  # an adapter test adds from there
    assert api.post("/api/v1/services", SPEC, format="json").status_code == 201
    return Service.objects.get(name="assistant")


def names(api) -> list[str]:
    return [a["name"] for a in api.get(URL).json()["adapters"]]


def test_adding_and_removing_an_adapter_is_a_version_that_restarts_nothing(
    api, service, store, django_capture_on_commit_callbacks
):
    before = service.parsed_spec().spec_hash()
    with django_capture_on_commit_callbacks(execute=True):  # the gateways are told at once
        added = api.post(URL, {"name": "chat", "model": "oss://bucket/adapters/chat/"},
                         format="json")  # fmt: skip
    assert added.status_code == 201, added.json()
    assert added.json() == {"name": "chat", "model": "oss://bucket/adapters/chat/",
                            "instances": []}  # fmt: skip
    assert names(api) == ["sql", "chat"]
    service.refresh_from_db()
    assert service.parsed_spec().spec_hash() == before  # no instance rolls
    assert published(store).services["assistant"].adapters == ("sql", "chat")
    history = api.get("/api/v1/services/assistant/versions").json()
    assert [v["note"] for v in history][:2] == ["adapter chat added", "created"]
    with django_capture_on_commit_callbacks(execute=True):
        assert api.delete(f"{URL}/sql").status_code == 204
    assert names(api) == ["chat"]
    assert published(store).services["assistant"].adapters == ("chat",)
    # A rollback restores the list the version had.
    rolled = api.post("/api/v1/services/assistant/rollback", {"version": 1}, format="json")
    assert rolled.status_code == 200, rolled.json()
    assert names(api) == ["sql"]


BAD = [
    ({"name": "a:b", "model": "x"}, "name", "no ':'"),
    ({"name": "chat", "model": "ftp://x/y"}, "model", "unknown scheme"),
    ({"name": "chat"}, "model", "is required"),
    ({"name": "chat", "model": "x", "scale": 2}, "scale", "does not support this field"),
    ({"name": "assistant", "model": "x"}, "name", "names the base model"),
]


@pytest.mark.parametrize(("body", "field", "words"), BAD)
def test_a_bad_adapter_is_a_400_naming_its_field_and_saves_nothing(api, service, body, field,
                                                                    words):  # fmt: skip
    answer = api.post(URL, body, format="json")
    assert answer.status_code == 400, answer.json()
    assert any(words in m for m in answer.json()["errors"][field]), answer.json()
    assert names(api) == ["sql"] and Service.objects.get(name="assistant").generation == 1


def test_a_name_taken_is_409_and_an_unknown_one_404(api, service):
    taken = api.post(URL, {"name": "sql", "model": "other"}, format="json")
    assert taken.status_code == 409 and taken.json()["errors"] == {"name": ["already exists"]}
    missing = api.delete(f"{URL}/nope")
    assert missing.status_code == 404 and "it has: sql" in missing.json()["detail"]


def test_an_engine_without_adapters_is_a_400_naming_llm_lora(api, store):
    spec = {"name": "blade", "metadata": {"gpu": 1},
            "llm": {"engine": "bladellm", "model": "/models/qwen"}}  # fmt: skip
    assert api.post("/api/v1/services", spec, format="json").status_code == 201
    answer = api.post("/api/v1/services/blade/adapters", {"name": "a", "model": "x"},
                      format="json")  # fmt: skip
    assert answer.status_code == 400 and "llm.lora" in answer.json()["errors"]


def test_each_adapter_says_where_it_is_loaded(api, service):
    states = [
        ("i-0", {"generation": 1, "loaded": ["sql"], "failed": {}}),
        ("i-1", {"generation": 1, "loaded": [], "failed": {"sql": "no adapter found"}}),
        ("i-2", {"generation": 0, "loaded": [], "failed": {}}),
        ("i-3", {}),
    ]
    for name, adapters in states:
        Instance.objects.create(service=service, name=name, node="n1", runtime="process",
                                spec_hash="h", state=InstanceState.READY,
                                adapters=adapters)  # fmt: skip
    (sql,) = api.get(URL).json()["adapters"]
    assert [(i["instance"], i["state"], i["message"]) for i in sql["instances"]] == [
        ("i-0", "loaded", ""), ("i-1", "failed", "no adapter found"), ("i-2", "loading", ""),
        ("i-3", "as started", ""),
    ]  # fmt: skip
    listed = api.get("/api/v1/services/assistant/instances").json()
    assert listed[0]["adapters"]["loaded"] == ["sql"]
