"""EAS instance types through the real API: a spec naming one is stored as sent (and given back
so by ?format=eas) and runs with the metadata the type fills in, which the answer's notes (and
an event) say; an unknown type is a warning and the service is still created; the operator's
file is read at start-up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controlplane.services.models import Event, Service
from controlplane.settings import _instance_types

pytestmark = pytest.mark.django_db

CORPUS = Path(__file__).parent / "eas_corpus"


def published(name: str) -> dict:
    return json.loads((CORPUS / f"{name}.json").read_text())


def on_sglang_type() -> dict:
    """EAS's quick start (corpus 02, which Wharf deploys today) on the instance type of the
    published SGLang service (corpus 42's cloud section, ecs.gn7i-c16g1.4xlarge)."""
    return {**published("02-json-deploy-quickstart-2026"),
            "cloud": published("42-skill-sglang-health-check")["cloud"]}  # fmt: skip


def test_a_service_on_the_published_sglang_type_is_sized_by_it(api, store):
    sent = on_sglang_type()
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert [n["field"] for n in body["notes"]] == ["cloud.computing.instance_type"]
    assert "metadata.cpu 16, metadata.memory 61440, metadata.gpu 1" in body["notes"][0]["message"]
    assert {w["field"] for w in body["warnings"]} == {"cloud", "metadata.workspace_id"}
    service = Service.objects.get(name="demo")
    given = {k: v for k, v in sent["metadata"].items() if k != "name"}  # name: top level
    assert service.spec["metadata"] == given and service.spec["cloud"] == sent["cloud"]
    metadata = service.parsed_spec().metadata  # what the API checked and the workers place
    assert (metadata.cpu, metadata.memory, metadata.gpu) == (16, 61440, 1)
    written = api.get("/api/v1/services/demo?format=eas").json()
    assert written["metadata"] == sent["metadata"]  # EAS's form: as sent
    event = Event.objects.get(service__name="demo", reason="SizedByInstanceType")
    assert event.message.startswith("cloud.computing.instance_type: ecs.gn7i-c16g1.4xlarge")


def test_metadata_the_user_gave_wins_over_the_type(api, store):
    sent = on_sglang_type()
    sent["metadata"] = {**sent["metadata"], "cpu": 4, "memory": 8000, "gpu": 1}
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 201, answer.json()
    assert "nothing changed" in answer.json()["notes"][0]["message"]
    metadata = Service.objects.get(name="demo").parsed_spec().metadata
    assert (metadata.cpu, metadata.memory, metadata.gpu) == (4, 8000, 1)


def test_an_unknown_type_is_a_warning_and_the_service_is_created(api, store):
    sent = on_sglang_type()
    sent["cloud"] = {"computing": {"instance_type": "ecs.gn99-imaginary.xlarge"}}
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 201, answer.json()
    warned = {w["field"]: w["message"] for w in answer.json()["warnings"]}
    assert "'ecs.gn99-imaginary.xlarge'" in warned["cloud.computing.instance_type"]
    assert answer.json()["notes"] == []
    metadata = Service.objects.get(name="demo").parsed_spec().metadata
    assert (metadata.cpu, metadata.memory, metadata.gpu) == (None, None, 0)


def test_an_update_is_sized_too(api, store):
    sent = published("02-json-deploy-quickstart-2026")
    assert api.post("/api/v1/services", sent, format="json").status_code == 201
    changed = {**sent, "cloud": {"computing": {"instances": [{"type": "ecs.g7.2xlarge"}]}}}
    answer = api.put("/api/v1/services/demo", changed, format="json")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["notes"][0]["field"] == "cloud.computing.instances[0].type"
    metadata = Service.objects.get(name="demo").parsed_spec().metadata
    assert (metadata.cpu, metadata.memory, metadata.gpu) == (8, 32768, 0)


def test_the_operators_file_is_read_and_a_bad_one_names_the_variable(tmp_path):
    good = tmp_path / "types.json"
    good.write_text(json.dumps({"ascend-snt9b-1card": {"cpu": 24, "memory_gib": 192,
                                                            "npu": 1}}))  # fmt: skip
    assert _instance_types(str(good))["ascend-snt9b-1card"].kind == "npu"
    assert "ecs.gn7i-c16g1.4xlarge" in _instance_types(str(good))
    bad = tmp_path / "bad.json"
    bad.write_text('{"t": {"cpu": 2}}')
    for path, why in ((bad, "memory_gib"), (tmp_path / "absent.json", "No such file")):
        with pytest.raises(ValueError, match=f"WHARF_INSTANCE_TYPES_FILE .*{why}"):
            _instance_types(str(path))


def test_both_clis_print_the_notes_beside_the_warnings(capsys):
    from wharfcli import eascmd, services

    answer = {
        "warnings": [{"field": "cloud", "message": "no effect here: …"}],
        "notes": [{"field": "cloud.computing.instance_type", "message": "filled in …"}],
    }
    services._warn(answer)
    eascmd._warn(answer)
    err = capsys.readouterr().err.splitlines()
    assert err == ["warning: cloud: no effect here: …",
                   "note: cloud.computing.instance_type: filled in …",
                   "[WARNING] cloud: no effect here: …",
                   "[INFO] cloud.computing.instance_type: filled in …"]  # fmt: skip
