"""Mirroring in the REST API (against the configured database and the tests' Redis): where a
service's calls are copied, what share, bad input named, and the figures the gateways measured
read back side by side."""

from __future__ import annotations

import time

import pytest

from contracts.call_figures import MIRROR, PREFIX, Figures, key, slot
from controlplane.services.models import Event
from controlplane.services.routing import build_snapshot
from tests.api_support import client_for, snapshot_store

pytestmark = pytest.mark.django_db


def spec(name: str) -> dict:
    return {"name": name, "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}


@pytest.fixture
def store(settings, redis_url):
    """The tests' Redis, without figures an earlier run left for these services."""
    client = snapshot_store(settings, redis_url)
    for name in ("main", "shadow"):
        for found in client.scan_iter(f"{PREFIX}{name}:*"):
            client.delete(found)
    return client


@pytest.fixture
def pair(api):
    for name in ("main", "shadow"):
        assert api.post("/api/v1/services", spec(name), format="json").status_code == 201
    return api


def test_a_mirror_reaches_the_gateways_and_shows_both_sides_figures(pair, store):
    set_ = pair.put("/api/v1/services/main/mirror", {"targets": ["shadow"], "ratio": 10},
                    format="json")  # fmt: skip
    assert set_.status_code == 200, set_.json()
    routed = build_snapshot().services["main"]
    assert (routed.mirror_targets, routed.mirror_ratio) == (("shadow",), 10)
    assert Event.objects.filter(service__name="main", reason="MirrorSet").exists()
    own, mirrored = Figures(), Figures()
    for _ in range(20):
        own.add(200, False, 80, 20)
    mirrored.add(200, False, 400, 60)
    mirrored.add(500, False, None, None)
    now = slot(time.time())
    for name, figures in ((key("main", "", now), own), (key("shadow", MIRROR, now), mirrored)):
        store.hset(name, mapping=figures.fields())
    shown = pair.get("/api/v1/services/main/mirror?minutes=2").json()
    assert (shown["targets"], shown["ratio"]) == (["shadow"], 10)
    assert shown["figures"]["service"] == own.summary()
    assert shown["figures"]["targets"]["shadow"]["errors"] == 1
    assert shown["figures"]["targets"]["shadow"]["ttft_p50_ms"] == 400  # a bucket's bound
    assert pair.delete("/api/v1/services/main/mirror").status_code == 204
    assert build_snapshot().services["main"].mirror_targets == ()
    assert pair.get("/api/v1/services/main/mirror").json()["targets"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"targets": ["shadow"], "ratio": 0}, "ratio"),
        ({"targets": ["shadow"], "ratio": 101}, "ratio"),
        ({"targets": [], "ratio": 10}, "targets"),
        ({"targets": ["a", "b", "c", "d", "e"], "ratio": 10}, "targets"),
        ({"targets": ["main"], "ratio": 10}, "targets[0]"),
        ({"targets": ["shadow", "nobody"], "ratio": 10}, "targets[1]"),
        ({"targets": ["shadow"], "ratio": 10, "mode": "x"}, "mode"),
        ({"ratio": 10}, "targets"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(pair, body, field):
    response = pair.put("/api/v1/services/main/mirror", body, format="json")
    assert response.status_code == 400 and field in response.json()["errors"], response.json()
    assert build_snapshot().services["main"].mirror_targets == ()


def test_another_workspaces_service_is_no_target(pair):
    other = client_for("mallory", workspace="other")
    assert other.post("/api/v1/services", spec("theirs"), format="json").status_code == 201
    refused = pair.put("/api/v1/services/main/mirror", {"targets": ["theirs"], "ratio": 5},
                       format="json")  # fmt: skip
    assert refused.status_code == 400 and "targets[0]" in refused.json()["errors"]
    assert other.get("/api/v1/services/main/mirror").status_code == 404
