"""Service versions: every spec a service has had is kept, numbered from 1, listed newest
first with secrets masked; a rollback copies an old version forward as a new one."""

from __future__ import annotations

import copy

import pytest

from contracts.spec import REDACTED, parse_spec
from controlplane.services.models import Event, Service, ServiceVersion
from controlplane.services.sealing import unseal

pytestmark = pytest.mark.django_db

SECRET = "SK-very-secret-1"
SPEC = {
    "name": "staged",
    "llm": {"engine": "vllm-cpu", "model": "/mnt/model"},
    "storage": [
        {
            "mount_path": "/mnt/model",
            "oss": {
                "path": "oss://bucket/qwen/",
                "access_key_id": "AK",
                "access_key_secret": SECRET,
            },
        }
    ],
}
V2 = {**SPEC, "metadata": {"instance": 2}}
URL = "/api/v1/services/staged"


def versions(api, name="staged"):
    response = api.get(f"/api/v1/services/{name}/versions")
    assert response.status_code == 200
    return response.json()


def rollback(api, body=None, name="staged"):
    return api.post(f"/api/v1/services/{name}/rollback", body, format="json")


@pytest.fixture
def two(api):
    """staged with version 1 (created) and version 2 (updated)."""
    assert api.post("/api/v1/services", SPEC, format="json").status_code == 201
    assert api.put(URL, V2, format="json").status_code == 200
    return api


def test_create_is_version_1_and_an_update_version_2(api):
    body = api.post("/api/v1/services", SPEC, format="json").json()
    assert body["version"] == 1
    (v1,) = ServiceVersion.objects.filter(service__name="staged")
    assert (v1.number, v1.note, unseal(v1.spec)) == (1, "created", SPEC)
    assert v1.spec_hash == parse_spec(SPEC).spec_hash()
    assert api.put(URL, V2, format="json").json()["version"] == 2
    v2 = ServiceVersion.objects.get(service__name="staged", number=2)
    assert (v2.note, unseal(v2.spec)) == ("updated", V2)
    assert api.get(URL).json()["version"] == 2
    assert [s["version"] for s in api.get("/api/v1/services").json()] == [2]


def test_start_stop_and_a_refused_update_make_no_version(two):
    two.post(f"{URL}/stop")
    two.post(f"{URL}/start")
    assert two.put(URL, {**SPEC, "llm": {"engine": "x"}}, format="json").status_code == 400
    assert ServiceVersion.objects.count() == 2


def test_the_list_is_newest_first_with_the_current_one_marked_and_secrets_masked(two):
    response = two.get(f"{URL}/versions")
    assert SECRET not in response.content.decode()
    listed = response.json()
    assert [(v["number"], v["note"], v["current"]) for v in listed] == [
        (2, "updated", True), (1, "created", False),
    ]  # fmt: skip
    assert set(listed[0]) == {
        "number",
        "created_at",
        "note",
        "spec_hash",
        "current",
        "hub_commits",
        "spec",
    }
    masked = copy.deepcopy(V2)
    masked["storage"][0]["oss"]["access_key_secret"] = REDACTED
    assert listed[0]["spec"] == masked
    assert listed[0]["spec"] == two.get(URL).json()["spec"]  # masked as the service's spec is
    assert listed[1]["spec_hash"] == parse_spec(SPEC).spec_hash()


def test_one_version_and_a_missing_one(two):
    response = two.get(f"{URL}/versions/1")
    assert SECRET not in response.content.decode()
    assert (response.json()["number"], response.json()["current"]) == (1, False)
    for missing in ("3", "0", "abc", "99999999999999999999999"):
        response = two.get(f"{URL}/versions/{missing}")
        assert response.status_code == 404
        assert f"no version '{missing}'" in response.json()["detail"]
    assert two.get("/api/v1/services/nope/versions").status_code == 404


def test_rollback_by_default_goes_to_the_version_before_the_current_one(two):
    response = rollback(two)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["version"], body["generation"]) == (3, 3)
    assert SECRET not in response.content.decode()
    v3 = ServiceVersion.objects.get(service__name="staged", number=3)
    assert (v3.note, unseal(v3.spec)) == ("rollback to version 1", SPEC)
    service = Service.objects.get(name="staged")
    assert service.plain_spec() == SPEC  # stored with its secret, not the masked one
    assert service.plain_spec()["storage"][0]["oss"]["access_key_secret"] == SECRET
    assert (service.generation, service.phase) == (3, "pending")  # the reconciler writes phase
    event = Event.objects.filter(service=service).first()
    assert event.reason == "RolledBack" and "version 1" in event.message
    listed = versions(two)
    assert [(v["number"], v["current"]) for v in listed] == [(3, True), (2, False), (1, False)]
    assert listed[0]["spec_hash"] == listed[2]["spec_hash"]


def test_rollback_to_a_named_version(two):
    assert rollback(two).status_code == 200  # v3 = v1
    response = rollback(two, {"version": 2})
    assert response.status_code == 200
    assert response.json()["version"] == 4
    assert Service.objects.get(name="staged").plain_spec() == V2
    assert versions(two)[0]["note"] == "rollback to version 2"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"version": 0}, "1 or more"),
        ({"version": -1}, "1 or more"),
        ({"version": "1"}, "1 or more"),
        ({"version": 1.0}, "1 or more"),
        ({"version": True}, "1 or more"),
        ({"version": [1]}, "1 or more"),
        ({"version": 3}, "versions 1 to 2"),
        ({"version": 10**30}, "versions 1 to 2"),
        ({"version": 2}, "current version"),
    ],
)
def test_a_bad_version_is_a_400_naming_it_and_changes_nothing(two, body, says):
    response = rollback(two, body)
    assert response.status_code == 400
    assert set(response.json()) == {"detail", "errors"}
    assert says in response.json()["errors"]["version"][0]
    assert ServiceVersion.objects.count() == 2
    assert Service.objects.get(name="staged").generation == 2


def test_unknown_fields_are_a_400_naming_them(two):
    response = rollback(two, {"version": 1, "force": True, "to": 1})
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"force", "to"}
    assert "force" in response.json()["detail"]
    assert ServiceVersion.objects.count() == 2


def test_a_body_that_is_not_an_object_is_a_400(two):
    response = rollback(two, [1])
    assert response.status_code == 400 and "body" in response.json()["errors"]


def test_no_previous_version_is_a_400(api):
    api.post("/api/v1/services", SPEC, format="json")
    response = rollback(api)
    assert response.status_code == 400
    assert "no previous version" in response.json()["errors"]["version"][0]
    assert rollback(api, {"version": 1}).status_code == 400  # the current one
    assert ServiceVersion.objects.count() == 1


def test_a_deleted_or_unknown_service_is_a_404(two):
    assert two.delete(URL).status_code == 202
    assert rollback(two, {"version": 1}).status_code == 404
    assert two.get(f"{URL}/versions").status_code == 404
    assert rollback(two, name="nope").status_code == 404
    assert ServiceVersion.objects.count() == 2


def test_a_version_that_no_longer_validates_is_a_400_with_its_errors(two):
    # Version 1 as it was saved under earlier, looser rules: the reserved port 8080.
    old = {**SPEC, "containers": [{"port": 8080}]}
    ServiceVersion.objects.filter(number=1).update(spec=old)
    response = rollback(two, {"version": 1})
    assert response.status_code == 400
    assert "containers[0].port" in response.json()["errors"]
    assert "version 1" in response.json()["detail"].lower()
    service = Service.objects.get(name="staged")
    assert (service.generation, service.plain_spec()) == (2, V2)
    assert ServiceVersion.objects.count() == 2


def test_rollback_runs_the_engine_validation(two, monkeypatch):
    import contracts.engines

    monkeypatch.setattr(contracts.engines, "validate", lambda spec: {"llm.model": ["retired"]})
    response = rollback(two)
    assert response.status_code == 400
    assert response.json()["errors"] == {"llm.model": ["retired"]}
    assert ServiceVersion.objects.count() == 2


def test_update_and_delete_write_intent_only(two):
    service = Service.objects.get(name="staged")
    assert service.phase == "pending"  # PUT did not write a phase
    two.delete(URL)
    assert Service.objects.get(name="staged").phase == "pending"


def test_the_list_reads_versions_without_a_query_per_service(api):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def listing() -> tuple[int, list]:
        with CaptureQueriesContext(connection) as queries:
            listed = api.get("/api/v1/services").json()
        return len(queries), [(s["name"], s["version"]) for s in listed]

    api.post("/api/v1/services", {**SPEC, "name": "s0"}, format="json")
    one, _ = listing()
    for n in (1, 2):
        api.post("/api/v1/services", {**SPEC, "name": f"s{n}"}, format="json")
    api.put(
        "/api/v1/services/s2", {**SPEC, "name": "s2", "metadata": {"instance": 2}}, format="json"
    )
    three, numbers = listing()
    assert numbers == [("s0", 1), ("s1", 1), ("s2", 2)]
    assert three == one
