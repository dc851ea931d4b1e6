"""Service groups in the REST API (against the configured database, PostgreSQL in CI):
membership from metadata.group, EAS's release, weights, names, and what the gateways get."""

from __future__ import annotations

import pytest

from contracts.service_groups import RoutedGroup
from contracts.spec import parse_spec
from controlplane.services.models import Event, Service, ServiceGroup
from controlplane.services.routing import build_snapshot
from tests.api_support import client_for

pytestmark = pytest.mark.django_db


def spec(name: str, group: str | None = "g", **metadata) -> dict:
    meta = {**metadata, **({"group": group} if group else {})}
    return {"name": name, "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}, "metadata": meta}


@pytest.fixture
def pair(api):
    """blue (the group's first member: released) and green (joined later: standalone)."""
    for name in ("blue", "green"):
        assert api.post("/api/v1/services", spec(name), format="json").status_code == 201
    return api


def group(api, name: str = "g") -> dict:
    response = api.get(f"/api/v1/groups/{name}")
    assert response.status_code == 200, response.json()
    return response.json()


def members(api, name: str = "g") -> dict[str, tuple[str, int, float]]:
    return {m["service"]: (m["traffic_state"], m["weight"], m["share"])
            for m in group(api, name)["members"]}  # fmt: skip


def test_the_first_member_is_released_and_a_later_one_waits_standalone(pair):
    # nobody ready yet: the weights alone decide (the member answers as it would alone)
    assert members(pair) == {"blue": ("grouping", 100, 1.0), "green": ("standalone", 100, 0.0)}
    found = group(pair)
    assert found["traffic_mode"] == "auto" and found["session_header"] == "x-session-id"
    assert found["endpoints"]["eas"].endswith("/api/predict/g")
    assert found["endpoints"]["model"] == "g"
    assert pair.get("/api/v1/services/green").json()["group"] == {
        "name": "g", "traffic_state": "standalone", "weight": 100}  # fmt: skip
    reasons = set(Event.objects.filter(service__name="green").values_list("reason", flat=True))
    assert "JoinedGroup" in reasons
    assert [g["name"] for g in pair.get("/api/v1/groups").json()] == ["g"]


def test_release_and_weights_reach_the_routing_snapshot(pair):
    released = pair.post("/api/v1/services/green/release",
                         {"traffic_state": "grouping", "weight": 100}, format="json")  # fmt: skip
    assert released.status_code == 200 and released.json()["name"] == "g"
    weights = {"weights": {"blue": 900, "green": 100}}
    changed = pair.patch("/api/v1/groups/g", weights, format="json")
    assert changed.status_code == 200
    assert changed.json()["traffic_mode"] == "customized"  # weights given: they decide
    Service.objects.filter(name__in=("blue", "green")).update(ready_instances=1)
    assert members(pair) == {"blue": ("grouping", 900, 0.9), "green": ("grouping", 100, 0.1)}
    routed = build_snapshot().groups["g"]
    assert routed == RoutedGroup("g", "customized", routed.members, ("x-session-id",))
    assert [(m.service, m.weight) for m in routed.members] == [("blue", 900), ("green", 100)]
    # blue-green: both weights in one call, one routing change
    pair.patch("/api/v1/groups/g", {"weights": {"blue": 0, "green": 1000}}, format="json")
    assert [m.weight for m in build_snapshot().groups["g"].members] == [0, 1000]
    out = pair.post("/api/v1/services/blue/release", {"traffic_state": "standalone"}, format="json")
    assert [m["service"] for m in out.json()["members"] if m["traffic_state"] == "grouping"] == [
        "green"
    ]
    assert [m.service for m in build_snapshot().groups["g"].members] == ["green"]


def test_a_groups_session_header_is_the_first_the_gateways_read(pair):
    pair.patch("/api/v1/groups/g", {"session_header": "X-User"}, format="json")
    assert build_snapshot().groups["g"].session_headers == ("x-user", "x-session-id")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/services/green/release", {"weight": 1001}, "weight"),
        ("/api/v1/services/green/release", {"weight": "ten"}, "weight"),
        ("/api/v1/services/green/release", {"traffic_state": "on"}, "traffic_state"),
        ("/api/v1/services/green/release", {"wieght": 1}, "wieght"),
        ("/api/v1/services/green/release", {}, "detail"),
        ("/api/v1/services/solo/release", {"weight": 1}, "metadata.group"),
        ("/api/v1/groups/g", {"weights": {"red": 1}}, "weights.red"),
        ("/api/v1/groups/g", {"weights": {"blue": -1}}, "weights.blue"),
        ("/api/v1/groups/g", {"traffic_mode": "random"}, "traffic_mode"),
        ("/api/v1/groups/g", {"session_header": "x y"}, "session_header"),
        ("/api/v1/groups/g", {"members": []}, "members"),
    ],
)
def test_every_bad_input_is_a_400_naming_the_field_and_changes_nothing(pair, path, body, field):
    pair.post("/api/v1/services", spec("solo", group=None), format="json")
    before = members(pair)
    send = pair.post if path.endswith("release") else pair.patch
    response = send(path, body, format="json")
    assert response.status_code == 400, response.json()
    assert field in (response.json().get("errors") or {"detail": ""}), response.json()
    assert members(pair) == before and group(pair)["traffic_mode"] == "auto"


def test_group_names_share_the_services_namespace(pair):
    taken = pair.post("/api/v1/services", spec("red", group="blue"), format="json")
    assert taken.status_code == 409 and "metadata.group" in taken.json()["errors"]
    named = pair.post("/api/v1/services", spec("g", group=None), format="json")
    assert named.status_code == 409 and "name" in named.json()["errors"]
    other = client_for("mallory", workspace="other")
    theirs = other.post("/api/v1/services", spec("red", group="g"), format="json")
    assert theirs.status_code == 409
    assert theirs.json()["errors"] == {"metadata.group": ["group 'g' is another workspace's"]}
    assert not Service.objects.filter(name="red").exists()
    assert other.get("/api/v1/groups/g").status_code == 404
    assert other.get("/api/v1/groups").json() == []


def test_moving_between_groups_moves_no_instance_and_an_empty_group_goes(pair):
    before = parse_spec(spec("green")).spec_hash()
    assert (
        parse_spec(spec("green", group="h")).spec_hash()
        == before
        == (parse_spec(spec("green", group=None)).spec_hash())
    )
    moved = pair.put("/api/v1/services/green", spec("green", group="h"), format="json")
    assert moved.status_code == 200
    assert members(pair, "h") == {"green": ("grouping", 100, 1.0)}  # first of a new group
    assert pair.delete("/api/v1/services/blue").status_code == 202
    assert not ServiceGroup.objects.filter(name="g").exists()
    assert pair.get("/api/v1/groups/g").status_code == 404
    pair.put("/api/v1/services/green", spec("green", group=None), format="json")
    assert not ServiceGroup.objects.exists() and "h" not in build_snapshot().groups


def test_a_key_may_be_scoped_to_a_group(pair):
    scoped = pair.post("/api/v1/keys", {"name": "app", "services": ["g"]}, format="json")
    assert scoped.status_code == 201, scoped.json()
    every = pair.post("/api/v1/keys", {"name": "all"}, format="json")
    keys = {k.id: k for k in build_snapshot().keys.values()}
    assert keys[scoped.json()["id"]].services == frozenset({"g"})
    assert {"g", "blue", "green"} <= keys[every.json()["id"]].services
    other = client_for("mallory", workspace="other")
    refused = other.post("/api/v1/keys", {"name": "x", "services": ["g"]}, format="json")
    assert refused.status_code == 400 and "services" in refused.json()["errors"]


def test_the_specs_traffic_state_releases_as_eas_writes_it(pair):
    eas = {**spec("green"), "metadata": {"group": "g", "traffic_state": "grouping"}}  # EAS's place
    assert pair.put("/api/v1/services/green", eas, format="json").status_code == 200
    assert members(pair)["green"][0] == "grouping"
    back = {**spec("green"), "networking": {"traffic_state": "standalone"}}
    assert pair.put("/api/v1/services/green", back, format="json").status_code == 200
    assert members(pair)["green"][0] == "standalone"
    alone = {**spec("solo", group=None), "networking": {"traffic_state": "grouping"}}
    refused = pair.post("/api/v1/services", alone, format="json")
    assert refused.status_code == 400 and "networking.traffic_state" in refused.json()["errors"]
    assert not Service.objects.filter(name="solo").exists()
