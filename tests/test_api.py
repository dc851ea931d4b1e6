"""The services REST API against the configured database (PostgreSQL in CI)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from controlplane.services.models import Event, Service
from controlplane.tokens.models import USE_NOTED_EVERY, ApiToken, ServiceToken, digest

pytestmark = pytest.mark.django_db

SPEC = {"name": "tiny", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}


def create(api, spec=SPEC):
    return api.post("/api/v1/services", spec, format="json")


def test_requires_an_api_token():
    response = APIClient().get("/api/v1/services")
    assert response.status_code == 401


def test_rejects_a_wrong_api_token():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer wat-not-a-token")
    assert client.get("/api/v1/services").status_code == 401


def test_a_tokens_last_use_is_written_once_a_minute_not_once_a_call(api):
    token = ApiToken.objects.get(user=api.user)
    assert token.last_used_at is None
    api.get("/api/v1/services")
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    with CaptureQueriesContext(connection) as calls:
        api.get("/api/v1/services")
    assert not [q for q in calls.captured_queries if q["sql"].startswith("UPDATE")]
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - USE_NOTED_EVERY)
    api.get("/api/v1/services")
    assert ApiToken.objects.get(pk=token.pk).last_used_at > first


def test_create_returns_the_service_token_once_and_stores_its_digest(api):
    response = create(api)
    assert response.status_code == 201
    token = response.json()["token"]
    stored = ServiceToken.objects.get(service__name="tiny")
    assert stored.digest == digest(token) and token not in stored.digest
    assert "token" not in api.get("/api/v1/services/tiny").json()


def test_create_records_intent_and_an_event(api):
    create(api)
    service = Service.objects.get(name="tiny")
    assert (service.desired_state, service.phase, service.generation) == ("running", "pending", 1)
    assert Event.objects.filter(service=service, reason="Created").exists()


def test_bad_spec_is_rejected_with_every_field_named_and_nothing_written(api):
    bad = {"name": "x", "containers": [{"port": "abc"}], "metadata": {"instance": -1}}
    response = create(api, bad)
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert {"containers[0].port", "metadata.instance"} <= set(errors)
    assert Service.objects.count() == 0 and ServiceToken.objects.count() == 0


def test_duplicate_name_is_a_conflict(api):
    create(api)
    response = create(api)
    assert response.status_code == 409
    assert response.json()["errors"] == {"name": ["already exists"]}


def test_read_list_and_filter_by_phase(api):
    create(api)
    assert [s["name"] for s in api.get("/api/v1/services").json()] == ["tiny"]
    assert api.get("/api/v1/services?phase=running").json() == []
    body = api.get("/api/v1/services/tiny").json()
    assert body["spec"] == SPEC
    assert body["endpoints"]["eas"].endswith("/api/predict/tiny")


def test_instances_wanted_are_counted_per_role_from_the_parsed_spec(api):
    create(api)
    pd = {"prefill": {"instance": 2}, "decode": {}}  # decode's instance: the spec's default, 1
    create(api, {"name": "split", "llm": {"engine": "vllm-cpu", "model": "tiny-llama", "pd": pd}})
    plain, split = (api.get(f"/api/v1/services/{n}").json() for n in ("tiny", "split"))
    assert (plain["instances"], plain["replicas"]) == (1, {"": 1})
    assert (split["instances"], split["replicas"]) == (3, {"prefill": 2, "decode": 1})
    assert plain["endpoints"]["model"] == "tiny"


def test_unknown_service_is_404(api):
    assert api.get("/api/v1/services/nope").status_code == 404


def test_update_bumps_the_generation(api):
    create(api)
    response = api.put(
        "/api/v1/services/tiny", {**SPEC, "metadata": {"instance": 2}}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["generation"] == 2
    assert Service.objects.get(name="tiny").spec["metadata"] == {"instance": 2}


def test_update_with_a_bad_spec_changes_nothing(api):
    create(api)
    response = api.put("/api/v1/services/tiny", {**SPEC, "llm": {"engine": "x"}}, format="json")
    assert response.status_code == 400
    service = Service.objects.get(name="tiny")
    assert (service.generation, service.plain_spec()) == (1, SPEC)


def test_update_cannot_rename(api):
    create(api)
    response = api.put("/api/v1/services/tiny", {**SPEC, "name": "other"}, format="json")
    assert response.status_code == 400 and "name" in response.json()["errors"]


def test_stop_and_start_set_the_desired_state(api):
    create(api)
    assert api.post("/api/v1/services/tiny/stop").json()["desired_state"] == "stopped"
    assert api.post("/api/v1/services/tiny/start").json()["desired_state"] == "running"
    assert api.post("/api/v1/services/tiny/reboot").status_code == 404


def test_delete_marks_the_service_for_removal(api):
    create(api)
    assert api.delete("/api/v1/services/tiny").status_code == 202
    assert Service.objects.get(name="tiny").desired_state == "deleted"
    assert api.get("/api/v1/services/tiny").status_code == 404
    assert api.get("/api/v1/services").json() == []


def test_rotating_the_token_retires_the_old_one(api):
    old = create(api).json()["token"]
    new = api.post("/api/v1/services/tiny/token").json()["token"]
    digests = set(ServiceToken.objects.values_list("digest", flat=True))
    assert digests == {digest(new)} and digest(old) not in digests


def test_instances_and_events_are_listed(api):
    create(api)
    assert api.get("/api/v1/services/tiny/instances").json() == []
    events = api.get("/api/v1/services/tiny/events").json()
    assert events[0]["reason"] == "Created"
    assert api.get("/api/v1/services/tiny/events?limit=x").status_code == 400


def test_preview_shows_the_container_without_creating_it(api):
    response = api.post("/api/v1/services/preview", SPEC, format="json")
    assert response.status_code == 200
    (container,) = response.json()["containers"]
    assert container["image"] == "wharf/vllm-cpu:0.32.0"
    assert "--model" in container["command"]
    assert Service.objects.count() == 0


def test_preview_rejects_a_bad_spec(api):
    response = api.post("/api/v1/services/preview", {"name": "x"}, format="json")
    assert response.status_code == 400 and "containers" in response.json()["errors"]


def test_malformed_json_is_a_400(api):
    response = api.post("/api/v1/services", "{not json", content_type="application/json")
    assert response.status_code == 400


SECRET_SPEC = {
    "name": "staged",
    "llm": {"engine": "vllm-cpu", "model": "/mnt/model"},
    "storage": [
        {
            "mount_path": "/mnt/model",
            "oss": {
                "path": "oss://bucket/qwen/",
                "access_key_id": "AK",
                "access_key_secret": "SK1",
            },
        }
    ],
}


def test_storage_secrets_are_never_echoed(api):
    body = create(api, SECRET_SPEC).json()
    assert "SK1" not in str(body)
    listed = api.get("/api/v1/services").content.decode()
    assert "SK1" not in listed and "******" in listed


def test_a_spec_read_back_and_put_keeps_its_secret(api):
    create(api, SECRET_SPEC)
    shown = api.get("/api/v1/services/staged").json()["spec"]
    assert api.put("/api/v1/services/staged", shown, format="json").status_code == 200
    stored = Service.objects.get(name="staged").plain_spec()["storage"][0]["oss"]
    assert stored["access_key_secret"] == "SK1"


def test_tensor_parallelism_beyond_the_cards_is_rejected(api):
    spec = {"name": "tp", "llm": {"engine": "vllm", "model": "m", "tensor_parallel_size": 4},
            "metadata": {"gpu": 2}}  # fmt: skip
    response = create(api, spec)
    assert response.status_code == 400
    assert "llm.tensor_parallel_size" in response.json()["errors"]


def test_draft_model_without_a_main_model_is_rejected(api):
    spec = {"name": "d", "llm": {"engine": "vllm-cpu", "speculative": {"model": "draft"}}}
    errors = create(api, spec).json()["errors"]
    assert "draft model needs a main model" in errors["llm.model"][0]


def test_gpu_engine_without_cards_is_rejected(api):
    errors = create(api, {"name": "g", "llm": {"engine": "tgi", "model": "m"}}).json()["errors"]
    assert "metadata.gpu" in errors


def test_preview_allocates_example_cards_for_tensor_parallelism(api):
    spec = {"name": "tp2", "llm": {"engine": "vllm", "model": "m", "tensor_parallel_size": 2},
            "metadata": {"gpu": 2}}  # fmt: skip
    (container,) = api.post("/api/v1/services/preview", spec, format="json").json()["containers"]
    assert container["gpus"] == [0, 1]
    assert "--tensor-parallel-size" in container["command"]
