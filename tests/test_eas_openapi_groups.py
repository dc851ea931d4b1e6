"""EAS's service group calls through EAS's own SDK against a live Wharf: members made with
CreateService (metadata.group), ReleaseService, ListGroups, DescribeGroup,
DescribeGroupEndpoints, and DescribeService's group fields; UpdateGroup and DeleteGroup, which
alibabacloud-eas20210701 7.0.0 has no method for, through its own signed `call_api` at EAS's
documented paths. Refusals in EAS's shape, naming EAS's field."""

from __future__ import annotations

import json

import pytest
from alibabacloud_eas20210701 import models as eas
from alibabacloud_tea_openapi import models as openapi
from alibabacloud_tea_util.models import RuntimeOptions

from controlplane.services.models import Event, Service, ServiceGroup
from controlplane.services.routing import build_snapshot
from tests.eas_openapi_support import REGION, key_pair, refusal, sdk

pytestmark = pytest.mark.django_db(transaction=True)

GATEWAY = "http://gateway.example:9000"


def spec(name: str, group: str | None = "chat") -> str:
    metadata = {"name": name, "instance": 1, **({"group": group} if group else {})}
    return json.dumps({"metadata": metadata, "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}})


@pytest.fixture
def client(live_server, settings, redis_url):
    """alice's SDK, after she made blue (the group's first member: released) and green
    (joined later: standalone) in group chat, and solo in none."""
    from controlplane import intents

    settings.REDIS_URL = redis_url
    settings.CELERY_BROKER_URL = redis_url.replace("unix://", "redis+socket://", 1)
    settings.WHARF_GATEWAY_URL = GATEWAY
    intents._celery.cache_clear()
    key, secret = key_pair("alice")
    client = sdk(live_server.url, key.key_id, secret)
    for name, group in (("blue", "chat"), ("green", "chat"), ("solo", None)):
        client.create_service(eas.CreateServiceRequest(body=spec(name, group)))
    yield client
    intents._celery.cache_clear()


def call(client, action: str, method: str, path: str, body=None, query=None) -> dict:
    """A call the SDK has no method for, signed by the SDK itself (ACS3-HMAC-SHA256)."""
    params = openapi.Params(action=action, version="2021-07-01", protocol="HTTP",
                            pathname=path, method=method, auth_type="AK", style="ROA",
                            req_body_type="json", body_type="json")  # fmt: skip
    request = openapi.OpenApiRequest(body=body, query=query)
    return client.call_api(params, request, RuntimeOptions())["body"]


def release(client, name: str, **fields):
    return client.release_service(REGION, name, eas.ReleaseServiceRequest(**fields)).body


def described(client, name: str):
    return client.describe_service(REGION, name).body


def test_members_made_by_create_service_form_a_group_eas_lists_and_describes(client):
    listed = client.list_groups(eas.ListGroupsRequest()).body
    assert [g.name for g in listed.groups] == ["chat"] and listed.total_count == 1
    (chat,) = listed.groups
    assert (chat.traffic_mode, chat.cluster_id) == ("auto", "local")
    assert chat.internet_endpoint == f"{GATEWAY}/api/predict/chat" == chat.intranet_endpoint
    assert chat.create_time.endswith("Z") and chat.access_token == ""
    shown = client.describe_group(REGION, "chat").body
    assert (shown.name, shown.traffic_mode) == ("chat", "auto")
    assert shown.internet_endpoint == chat.internet_endpoint
    blue, green, solo = (described(client, n) for n in ("blue", "green", "solo"))
    assert (blue.service_group, blue.traffic_state, blue.weight) == ("chat", "grouping", 100)
    assert (green.service_group, green.traffic_state, green.weight) == ("chat", "standalone", 100)
    assert (solo.service_group, solo.traffic_state, solo.weight) == ("", "standalone", 0)
    services = client.list_services(eas.ListServicesRequest(service_name="green")).body.services
    assert services[0].service_group == "chat"


def test_list_groups_filters_by_name_and_pages(client):
    client.create_service(eas.CreateServiceRequest(body=spec("red", "assist")))
    every = client.list_groups(eas.ListGroupsRequest()).body
    assert [g.name for g in every.groups] == ["assist", "chat"]
    named = client.list_groups(eas.ListGroupsRequest(filter="HA")).body
    assert [g.name for g in named.groups] == ["chat"] and named.total_count == 1
    paged = client.list_groups(eas.ListGroupsRequest(page_size=1, page_number=2)).body
    assert [g.name for g in paged.groups] == ["chat"]
    assert (paged.total_count, paged.page_number, paged.page_size) == (2, 2, 1)
    other = client.list_groups(eas.ListGroupsRequest(workspace_id="elsewhere")).body
    assert other.groups == [] and other.total_count == 0


def test_release_service_sets_weight_and_traffic_state_and_reaches_the_gateways(client):
    answer = release(client, "green", weight=10, traffic_state="grouping")
    assert answer.request_id and "grouping, weight 10" in answer.message
    green = described(client, "green")
    assert (green.traffic_state, green.weight) == ("grouping", 10)
    assert Event.objects.filter(service__name="green", reason="Released").exists()
    routed = build_snapshot().groups["chat"]
    assert [(m.service, m.weight) for m in routed.members] == [("blue", 100), ("green", 10)]
    release(client, "blue", traffic_state="standalone")  # the weight stays
    blue = described(client, "blue")
    assert (blue.traffic_state, blue.weight) == ("standalone", 100)
    assert [m.service for m in build_snapshot().groups["chat"].members] == ["green"]


def test_update_group_sets_the_traffic_mode(client):
    path = f"/api/v2/groups/{REGION}/chat"
    body = call(client, "UpdateGroup", "PUT", path, {"TrafficMode": "customized"})
    assert body["RequestId"] and "chat" in body["Message"]
    assert ServiceGroup.objects.get(name="chat").traffic_mode == "customized"
    assert build_snapshot().groups["chat"].mode == "customized"
    assert client.describe_group(REGION, "chat").body.traffic_mode == "customized"
    call(client, "UpdateGroup", "PUT", path, {"TrafficMode": "auto"})
    assert ServiceGroup.objects.get(name="chat").traffic_mode == "auto"


@pytest.mark.parametrize(
    ("body", "named"),
    [({"TrafficMode": "random"}, "TrafficMode"), ({"TrafficMode": "auto", "Weights": {}},
     "Weights"), ({}, "TrafficMode")],
)  # fmt: skip
def test_update_group_refuses_what_wharf_cannot_act_on_naming_it(client, body, named):
    path = f"/api/v2/groups/{REGION}/chat"
    exc = refusal(lambda: call(client, "UpdateGroup", "PUT", path, body))
    assert (exc.status_code, exc.code) == (400, "InvalidParameter")
    assert named in exc.message
    assert ServiceGroup.objects.get(name="chat").traffic_mode == "auto"


def test_describe_group_endpoints_is_the_gateways_group_path(client):
    body = client.describe_group_endpoints(REGION, "chat").body
    (endpoint,) = body.endpoints
    assert endpoint.internet_endpoints == [f"{GATEWAY}/api/predict/chat"]
    assert endpoint.intranet_endpoints == endpoint.internet_endpoints
    assert (endpoint.endpoint_type, endpoint.path_type, endpoint.port) == (
        "DefaultGateway", "Group", 9000)  # fmt: skip
    assert "member's token" in body.message


@pytest.mark.parametrize(
    "make",
    [
        lambda c: c.describe_group(REGION, "nope"),
        lambda c: c.describe_group_endpoints(REGION, "nope"),
        lambda c: call(c, "UpdateGroup", "PUT", f"/api/v2/groups/{REGION}/nope",
                       {"TrafficMode": "auto"}),
        lambda c: call(c, "DeleteGroup", "DELETE", f"/api/v2/groups/{REGION}/nope"),
    ],
)  # fmt: skip
def test_an_unknown_group_is_eas_not_found(client, make):
    exc = refusal(lambda: make(client))
    assert (exc.status_code, exc.code) == (404, "InvalidGroup.NotFound")
    assert "nope" in exc.message


def test_another_workspaces_group_is_as_absent_as_one_that_never_was(client, live_server):
    key, secret = key_pair("bob", workspace="other")
    bobs = sdk(live_server.url, key.key_id, secret)
    assert bobs.list_groups(eas.ListGroupsRequest()).body.groups == []
    assert refusal(lambda: bobs.describe_group(REGION, "chat")).status_code == 404
    exc = refusal(lambda: release(bobs, "green", weight=5))
    assert (exc.status_code, exc.code) == (404, "InvalidService.NotFound")


@pytest.mark.parametrize(
    ("name", "fields", "status", "named"),
    [
        ("green", {"weight": 5000}, 400, "Weight"),
        ("green", {"weight": -1}, 400, "Weight"),
        ("green", {"traffic_state": "everywhere"}, 400, "TrafficState"),
        ("green", {}, 400, "Weight or TrafficState"),
        ("solo", {"weight": 10}, 400, "metadata.group"),
        ("nope", {"weight": 10}, 404, "nope"),
    ],
)
def test_release_service_refuses_a_bad_value_naming_it(client, name, fields, status, named):
    exc = refusal(lambda: release(client, name, **fields))
    assert exc.status_code == status and named in exc.message
    assert exc.code == ("InvalidParameter" if status == 400 else "InvalidService.NotFound")
    assert Service.objects.get(name="green").group_weight == 100


def test_a_viewer_may_describe_but_not_release(client, live_server):
    key, secret = key_pair("vera", role="viewer")
    viewer = sdk(live_server.url, key.key_id, secret)
    assert viewer.describe_group(REGION, "chat").body.name == "chat"
    exc = refusal(lambda: release(viewer, "green", weight=5))
    assert (exc.status_code, exc.code) == (403, "Forbidden.PrivilegeCheckFailed")


def test_delete_group_is_refused_saying_to_change_the_members_metadata(client):
    path = f"/api/v2/groups/{REGION}/chat"
    exc = refusal(lambda: call(client, "DeleteGroup", "DELETE", path))
    assert (exc.status_code, exc.code) == (409, "InvalidOperation")
    assert "metadata.group" in exc.message and "blue, green" in exc.message
    cascade = refusal(lambda: call(client, "DeleteGroup", "DELETE", path,
                                   query={"CascadeDelete": "true"}))  # fmt: skip
    assert (cascade.status_code, cascade.code) == (400, "InvalidParameter")
    assert "CascadeDelete" in cascade.message
    assert ServiceGroup.objects.filter(name="chat").exists()
    assert Service.objects.filter(name__in=("blue", "green"), desired_state="running").count() == 2


def test_service_mirror_through_eas_sdk(client):
    made = client.create_service_mirror(
        REGION, "blue", eas.CreateServiceMirrorRequest(ratio=20, target=["green"])
    ).body
    assert "created" in made.message
    assert build_snapshot().services["blue"].mirror_targets == ("green",)
    shown = client.describe_service_mirror(REGION, "blue").body
    assert (shown.service_name, shown.target, shown.ratio) == ("blue", "green", "20")
    client.update_service_mirror(
        REGION, "blue", eas.UpdateServiceMirrorRequest(ratio=50, target=["green", "solo"])
    )
    routed = build_snapshot().services["blue"]
    assert (routed.mirror_targets, routed.mirror_ratio) == (("green", "solo"), 50)
    bad = refusal(
        lambda: client.update_service_mirror(
            REGION, "blue", eas.UpdateServiceMirrorRequest(ratio=101, target=["green"])
        )
    )
    assert bad.status_code == 400 and "Ratio" in bad.message
    itself = refusal(
        lambda: client.create_service_mirror(
            REGION, "blue", eas.CreateServiceMirrorRequest(ratio=5, target=["blue"])
        )
    )
    assert itself.status_code == 400 and "itself" in itself.message
    client.delete_service_mirror(REGION, "blue")
    assert build_snapshot().services["blue"].mirror_targets == ()
    assert client.describe_service_mirror(REGION, "blue").body.target == ""
    assert Event.objects.filter(service__name="blue", reason="MirrorRemoved").exists()
