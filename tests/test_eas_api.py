"""EAS service JSON through the real API (PostgreSQL): published files deployed unchanged are
stored in Wharf's canonical spelling, with a warning (in the answer and as an event) for each
cloud-only field; EAS processor services are refused naming each processor field and what to
deploy instead; spellings of one setting that disagree are a 400 naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controlplane.services.models import Event, Service

pytestmark = pytest.mark.django_db

CORPUS = Path(__file__).parent / "eas_corpus"


def published(name: str) -> dict:
    return json.loads((CORPUS / f"{name}.json").read_text())


def test_the_eas_quick_start_deploys_unchanged_with_a_warning_per_cloud_only_field(api, store):
    sent = published("02-json-deploy-quickstart-2026")
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert body["name"] == "demo"
    warned = {w["field"]: w["message"] for w in body["warnings"]}
    assert set(warned) == {"cloud", "metadata.workspace_id"}
    assert all(message.startswith("no effect here: ") for message in warned.values())
    stored = Service.objects.get(name="demo").spec
    assert stored["name"] == "demo" and "name" not in stored["metadata"]  # canonical
    assert stored["cloud"] == sent["cloud"]  # kept as given
    reasons = Event.objects.filter(service__name="demo", reason="FieldIgnored")
    assert sorted(e.message.split(":")[0] for e in reasons) == ["cloud", "metadata.workspace_id"]


def test_an_update_in_eas_spellings_is_stored_canonical(api, store):
    sent = published("01-json-deploy-quickstart-2025")
    assert api.post("/api/v1/services", sent, format="json").status_code == 201
    name = sent["metadata"]["name"]
    more = {"instance": "2", "rpc.keepalive": "5000", "eas.termination_grace_period": 60}
    changed = {**sent, "metadata": {**sent["metadata"], **more}}
    answer = api.put(f"/api/v1/services/{name}", changed, format="json")
    assert answer.status_code == 200, answer.json()
    assert [w["field"] for w in answer.json()["warnings"]] == ["cloud"]
    metadata = Service.objects.get(name=name).spec["metadata"]
    assert metadata["instance"] == 2 and metadata["rpc"] == {"keepalive": 5000}
    assert metadata["termination_grace_period"] == 60


@pytest.mark.parametrize(
    ("file", "fields"),
    [
        ("21-eascmd-create-tf-processor", {"processor", "model_path"}),
        ("30-triton-processor", {"processor", "processor_params"}),
        ("31-pai-prediction-echo-cpp", {"processor_path", "processor_entry", "processor_type",
                                        "model_path"}),
    ],
)  # fmt: skip
def test_a_processor_service_is_refused_naming_each_field_and_what_to_deploy(api, file, fields):
    answer = api.post("/api/v1/services", published(file), format="json")
    assert answer.status_code == 400
    errors = answer.json()["errors"]
    assert fields <= set(errors)
    assert all("deploy an image in containers[]" in errors[field][0] for field in fields)
    if file.startswith("30-"):
        assert "tritonserver" in errors["processor"][0]
    assert not Service.objects.exists()


def test_two_spellings_that_disagree_are_a_400_naming_the_setting(api):
    sent = {**published("02-json-deploy-quickstart-2026"), "name": "other"}
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 400
    assert "name" in answer.json()["errors"]
    assert not Service.objects.exists()


def test_a_field_in_no_eas_document_is_still_a_400_naming_it(api):
    sent = published("02-json-deploy-quickstart-2026")
    sent["metadata"]["workspace_idd"] = "typo"
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 400
    assert "metadata.workspace_idd" in answer.json()["errors"]


def test_format_eas_gives_the_spec_back_as_eas_writes_it(api, store):
    sent = published("02-json-deploy-quickstart-2026")
    sent["metadata"]["eas.termination_grace_period"] = "45"
    sent["dockerAuth"] = "dXNlcjpwYXNzd29yZA=="
    assert api.post("/api/v1/services", sent, format="json").status_code == 201
    answer = api.get("/api/v1/services/demo?format=eas")
    assert answer.status_code == 200
    written = answer.json()
    assert written["metadata"]["name"] == "demo" and "name" not in written
    assert written["metadata"]["eas.termination_grace_period"] == 45
    assert written["metadata"]["workspace_id"] == "your-workspace-id"
    assert written["cloud"] == sent["cloud"] and written["containers"] == sent["containers"]
    assert written["dockerAuth"] == "******"  # secrets stay masked
    # What EAS writes, Wharf takes back: the same canonical spec.
    from contracts.eas import normalise

    assert normalise(written) == normalise({**sent, "dockerAuth": "******"})
    assert api.get("/api/v1/services/demo?format=yaml").status_code in (400, 404)


def test_labels_select_services_as_eas_lists_them(api, store):
    base = published("02-json-deploy-quickstart-2026")
    for name, labels in (("a", {"team": "search", "tier": "gold"}), ("b", {"team": "search"}),
                         ("c", None)):  # fmt: skip
        spec = {**base, "metadata": {**base["metadata"], "name": name}}
        if labels:
            spec["labels"] = labels
        assert api.post("/api/v1/services", spec, format="json").status_code == 201

    def names(query: str) -> list[str]:
        answer = api.get(f"/api/v1/services?{query}")
        assert answer.status_code == 200, answer.json()
        return [s["name"] for s in answer.json()]

    assert names("label=team=search") == ["a", "b"]
    assert names("label=team:search&label=tier=gold") == ["a"]  # EAS's key:value too
    assert names("label=team=other") == []
    bad = api.get("/api/v1/services?label=novalue")
    assert bad.status_code == 400 and "label" in bad.json()["errors"]
    refused = api.post("/api/v1/services", {**base, "labels": {"bad key": "x"}}, format="json")
    assert refused.status_code == 400 and "labels" in refused.json()["errors"]
