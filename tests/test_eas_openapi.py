"""EAS's management OpenAPI through EAS's own Python SDK against a live Wharf: every call
Wharf answers, in EAS's shape, with the v1 API's logic (validation, versions, events, the
reconciler asked), signed with Wharf's access key pairs."""

from __future__ import annotations

import json

import httpx
import pytest
import redis
from alibabacloud_eas20210701 import models as eas
from alibabacloud_tea_util.models import RuntimeOptions

from contracts import reconcile
from controlplane import intents
from controlplane.audit.models import AuditEntry
from controlplane.services.choices import InstanceState
from controlplane.services.models import Event, Instance, Service
from tests.eas_openapi_support import REGION, key_pair, refusal, sdk

pytestmark = pytest.mark.django_db(transaction=True)

SPEC = {"metadata": {"name": "tiny", "instance": 1},
        "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}  # fmt: skip


@pytest.fixture
def broker(settings, redis_url):
    """The API's Redis and Celery broker on the test Redis (the reconciler's asks land there)."""
    settings.REDIS_URL = redis_url
    settings.CELERY_BROKER_URL = redis_url.replace("unix://", "redis+socket://", 1)
    intents._celery.cache_clear()
    client = redis.Redis.from_url(redis_url)
    client.delete("celery", reconcile.pending_key("tiny"))
    yield client
    client.delete("celery", reconcile.pending_key("tiny"))
    intents._celery.cache_clear()


@pytest.fixture
def client(live_server, broker):
    key, secret = key_pair("alice")
    return sdk(live_server.url, key.key_id, secret)


def create(client, spec=SPEC, **request):
    body = json.dumps(spec)
    return client.create_service(eas.CreateServiceRequest(body=body, **request)).body


def described(client, name="tiny"):
    return client.describe_service(REGION, name).body


def test_create_service_deploys_an_eas_spec_through_the_v1_logic(client, broker):
    body = create(client)
    assert (body.service_name, body.region, body.status) == ("tiny", "local", "Waiting")
    assert body.request_id and body.internet_endpoint.endswith("/api/predict/tiny")
    service = Service.objects.get(name="tiny")
    assert service.spec["name"] == "tiny"  # stored canonical, as the v1 API stores it
    assert service.versions.count() == 1
    assert Event.objects.filter(service=service, reason="Created").exists()
    assert broker.exists(reconcile.pending_key("tiny"))  # the reconciler asked on commit
    entry = AuditEntry.objects.get(action="POST /api/v2/services")
    assert (entry.actor, entry.via, entry.service, entry.status) == ("alice", "token eas",
                                                                     "tiny", 200)  # fmt: skip


def test_create_service_takes_labels_from_its_query(client):
    create(client, labels={"team": "search"})
    assert Service.objects.get(name="tiny").spec["labels"] == {"team": "search"}
    (label,) = described(client).labels
    assert (label.label_key, label.label_value) == ("team", "search")


def test_create_service_refuses_a_bad_spec_naming_the_field(client):
    bad = {**SPEC, "metadata": {"name": "tiny", "instance": -1}}
    exc = refusal(lambda: create(client, bad))
    assert (exc.status_code, exc.code) == (400, "InvalidParameter")
    assert "metadata.instance" in exc.message and exc.request_id
    assert not Service.objects.exists()


def test_create_service_refuses_a_name_taken(client):
    create(client)
    exc = refusal(lambda: create(client))
    assert (exc.status_code, exc.code) == (409, "InvalidService.Conflict")


def test_describe_service_answers_the_stored_spec_as_eas_writes_it(client):
    create(client)
    body = described(client)
    assert (body.service_name, body.status, body.total_instance) == ("tiny", "Waiting", 1)
    assert (body.running_instance, body.pending_instance) == (0, 1)
    assert (body.current_version, body.latest_version) == (1, 1)
    config = json.loads(body.service_config)
    assert config["metadata"]["name"] == "tiny" and config["llm"]["model"] == "tiny-llama"


def test_describe_service_of_an_unknown_name_is_eas_not_found(client):
    exc = refusal(lambda: described(client, "nope"))
    assert (exc.status_code, exc.code) == (404, "InvalidService.NotFound")


def test_list_services_filters_by_name_and_pages(client):
    create(client)
    create(client, {**SPEC, "metadata": {"name": "other", "instance": 1}})
    listed = client.list_services(eas.ListServicesRequest(sort="ServiceName", order="asc")).body
    assert [s.service_name for s in listed.services] == ["other", "tiny"]
    assert listed.total_count == 2
    named = client.list_services(eas.ListServicesRequest(service_name="tin")).body
    assert [s.service_name for s in named.services] == ["tiny"]
    paged = client.list_services(
        eas.ListServicesRequest(page_size=1, page_number=2, sort="ServiceName", order="asc")
    ).body
    assert [s.service_name for s in paged.services] == ["tiny"] and paged.total_count == 2


def test_list_services_refuses_a_filter_wharf_has_no_meaning_for(client):
    exc = refusal(lambda: client.list_services(eas.ListServicesRequest(quota_id="q-1")))
    assert exc.code == "InvalidParameter" and "QuotaId" in exc.message


def test_update_service_merges_by_default(client):
    create(client)
    change = json.dumps({"metadata": {"instance": 2}})
    client.update_service(REGION, "tiny", eas.UpdateServiceRequest(body=change))
    service = Service.objects.get(name="tiny")
    assert service.spec["metadata"]["instance"] == 2
    assert service.spec["llm"]["model"] == "tiny-llama"  # kept: merged
    assert service.versions.count() == 2


def test_update_service_replace_takes_the_body_as_the_whole_spec(client):
    create(client, {**SPEC, "labels": {"team": "search"}})
    whole = json.dumps(SPEC)
    client.update_service(
        REGION, "tiny", eas.UpdateServiceRequest(body=whole, update_type="replace")
    )
    assert "labels" not in Service.objects.get(name="tiny").spec


def test_update_service_refuses_a_bad_change_and_keeps_the_spec(client):
    create(client)
    change = json.dumps({"metadata": {"instance": "many"}})
    exc = refusal(
        lambda: client.update_service(REGION, "tiny", eas.UpdateServiceRequest(body=change))
    )
    assert exc.code == "InvalidParameter" and "metadata.instance" in exc.message
    assert Service.objects.get(name="tiny").spec["metadata"]["instance"] == 1


def test_stop_and_start_service_change_the_desired_state(client):
    create(client)
    client.stop_service(REGION, "tiny")
    assert Service.objects.get(name="tiny").desired_state == "stopped"
    client.start_service(REGION, "tiny")
    assert Service.objects.get(name="tiny").desired_state == "running"
    reasons = set(Event.objects.filter(service__name="tiny").values_list("reason", flat=True))
    assert {"StopRequested", "StartRequested"} <= reasons


def test_delete_service_asks_for_deletion_then_it_is_gone(client):
    create(client)
    body = client.delete_service(REGION, "tiny").body
    assert "terminating" in body.message
    assert Service.objects.get(name="tiny").desired_state == "deleted"
    assert refusal(lambda: described(client)).code == "InvalidService.NotFound"


def test_list_service_instances_answers_each_as_eas_shows_it(client):
    url = "http://10.0.0.5:31000"
    create(client)
    service = Service.objects.get(name="tiny")
    for name, state in (("tiny-0", InstanceState.READY), ("tiny-1", InstanceState.STARTING)):
        Instance.objects.create(service=service, name=name, node="n1", runtime="process",
                                spec_hash="h", state=state, url=url)  # fmt: skip
    body = client.list_service_instances(REGION, "tiny",
                                         eas.ListServiceInstancesRequest()).body  # fmt: skip
    shown = {i.instance_name: (i.status, i.ready_processes, i.inner_ip) for i in body.instances}
    assert shown == {"tiny-0": ("Running", 1, "10.0.0.5"), "tiny-1": ("Running", 0, "10.0.0.5")}
    assert body.total_count == 2


def test_describe_service_event_answers_the_services_events(client):
    create(client)
    client.stop_service(REGION, "tiny")
    body = client.describe_service_event(REGION, "tiny", eas.DescribeServiceEventRequest()).body
    assert [e.reason for e in body.events] == ["StopRequested", "Created"]  # newest first
    assert {e.type for e in body.events} == {"Normal"} and body.total_count == 2


def test_list_service_versions_and_switching_back_to_one(client):
    create(client)
    change = json.dumps({"metadata": {"instance": 2}})
    client.update_service(REGION, "tiny", eas.UpdateServiceRequest(body=change))
    versions = client.list_service_versions(REGION, "tiny", eas.ListServiceVersionsRequest())
    assert [v.image_id for v in versions.body.versions] == [2, 1]
    client.update_service_version(REGION, "tiny", eas.UpdateServiceVersionRequest(version=1))
    service = Service.objects.get(name="tiny")
    assert service.spec["metadata"]["instance"] == 1 and service.versions.count() == 3


def test_an_unsigned_request_is_an_incomplete_signature(live_server):
    answer = httpx.get(f"{live_server.url}/api/v2/services",
                       headers={"Authorization": "Bearer wat-an-api-token"})  # fmt: skip
    assert answer.status_code == 400
    assert answer.json()["Code"] == "IncompleteSignature" and answer.json()["RequestId"]


def test_a_wrong_secret_is_signature_does_not_match(live_server, broker):
    key, _ = key_pair("alice")
    wrong = sdk(live_server.url, key.key_id, "not-the-secret")
    exc = refusal(lambda: wrong.list_services(eas.ListServicesRequest()))
    assert (exc.status_code, exc.code) == (400, "SignatureDoesNotMatch") and exc.request_id


def test_an_unknown_key_is_not_found(live_server, broker):
    stranger = sdk(live_server.url, "WAKNOSUCHKEY", "secret")
    exc = refusal(lambda: stranger.list_services(eas.ListServicesRequest()))
    assert (exc.status_code, exc.code) == (404, "InvalidAccessKeyId.NotFound")


def test_a_revoked_key_is_refused(live_server, broker):
    key, secret = key_pair("alice")
    key.revoked_at = key.created_at
    key.save()
    exc = refusal(lambda: sdk(live_server.url, key.key_id, secret).list_services(
        eas.ListServicesRequest()))  # fmt: skip
    assert exc.code == "InvalidAccessKeyId.NotFound"


def test_a_stale_timestamp_is_expired(client):
    stale = {"x-acs-date": "2020-01-01T00:00:00Z"}  # signed by the SDK, so only its age is wrong
    exc = refusal(lambda: client.list_services_with_options(
        eas.ListServicesRequest(), stale, RuntimeOptions()))  # fmt: skip
    assert (exc.status_code, exc.code) == (400, "InvalidTimeStamp.Expired")


def test_a_key_of_one_workspace_cannot_see_anothers_services(live_server, broker):
    mine, my_secret = key_pair("alice", workspace="team-a")
    theirs, their_secret = key_pair("bob", workspace="team-b")
    alice = sdk(live_server.url, mine.key_id, my_secret)
    bob = sdk(live_server.url, theirs.key_id, their_secret)
    create(bob)
    assert alice.list_services(eas.ListServicesRequest()).body.services == []
    assert refusal(lambda: described(alice)).code == "InvalidService.NotFound"
    assert refusal(lambda: alice.delete_service(REGION, "tiny")).code == "InvalidService.NotFound"
    change = eas.UpdateServiceRequest(body=json.dumps({"metadata": {"instance": 3}}))
    assert refusal(lambda: alice.update_service(REGION, "tiny", change)).status_code == 404
    assert Service.objects.get(name="tiny").desired_state == "running"
    listed = bob.list_services(eas.ListServicesRequest()).body.services
    assert [s.service_name for s in listed] == ["tiny"]


def test_a_viewers_key_reads_but_cannot_create(live_server, broker):
    key, secret = key_pair("vic", role="viewer")
    viewer = sdk(live_server.url, key.key_id, secret)
    assert viewer.list_services(eas.ListServicesRequest()).body.total_count == 0
    exc = refusal(lambda: create(viewer))
    assert (exc.status_code, exc.code) == (403, "Forbidden.PrivilegeCheckFailed")


def test_create_service_refuses_another_workspace_id(client):
    exc = refusal(lambda: create(client, workspace_id="team-b"))
    assert exc.code == "InvalidParameter" and "WorkspaceId" in exc.message
