"""No service can harm another: a service the routing snapshot or the reconciler cannot
handle is left out with an event, and every other service carries on (real Redis, the
configured database, real runtimes)."""

from __future__ import annotations

import pytest

from contracts.routing import Snapshot
from controlplane.services.models import Service
from controlplane.services.routing import publish_snapshot
from controlplane.tokens.models import digest
from tests.api_support import default_workspace, published
from workers.tasks import FAILED_DELAY, reconcile_isolated

pytestmark = pytest.mark.django_db

HEALTHY = {"name": "healthy", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"},
           "metadata": {"rpc": {"rate_limit": 7}}}  # fmt: skip
# Stored before the schema was strict: a string where the gateway expects a number.
POISON = {"name": "poison", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"},
          "metadata": {"rpc": {"rate_limit": "10", "keepalive": "5000"}}}  # fmt: skip


def test_a_poison_service_is_left_out_and_the_others_keep_routing(store):
    Service.objects.create(workspace=default_workspace(), name="healthy", spec=HEALTHY)
    poison = Service.objects.create(workspace=default_workspace(), name="poison", spec=POISON)
    publish_snapshot()
    publish_snapshot()
    snapshot = published(store)
    assert set(snapshot.services) == {"healthy"}
    assert snapshot.services["healthy"].rate_limit == 7
    (event,) = poison.events.filter(reason="Unroutable")  # once, not once per publish
    assert "metadata.rpc.rate_limit" in event.message


def test_key_changes_still_reach_the_gateways_next_to_a_poison_service(
    store, api, django_capture_on_commit_callbacks
):
    Service.objects.create(workspace=default_workspace(), name="healthy", spec=HEALTHY)
    Service.objects.create(workspace=default_workspace(), name="poison", spec=POISON)
    with django_capture_on_commit_callbacks(execute=True):
        created = api.post("/api/v1/keys", {"name": "app"}, format="json").json()
    assert digest(created["key"]) in published(store).keys
    with django_capture_on_commit_callbacks(execute=True):
        assert api.delete(f"/api/v1/keys/{created['id']}").status_code == 204
    assert digest(created["key"]) not in published(store).keys


def test_a_snapshot_entry_of_the_wrong_shape_costs_the_gateway_only_that_entry():
    good = Snapshot.from_json(
        '{"version": 3, "services": {"a": {"rate_limit": 5}, "b": {"rate_limit": "5"},'
        ' "c": {"instances": [{"url": "x"}]}},'
        ' "keys": {"d1": {"id": "k1"}, "d2": {"id": "k2", "rpm": "60"}}}'
    )
    assert set(good.services) == {"a"} and set(good.keys) == {"d1"}
    assert sorted(good.unreadable) == ["key d2…", "service b", "service c"]


def test_a_pass_that_raises_is_recorded_and_retried_and_the_others_go_on(settings):
    Service.objects.create(
        workspace=default_workspace(), name="healthy", spec={**HEALTHY, "metadata": {"instance": 0}}
    )
    broken = Service.objects.create(
        workspace=default_workspace(), name="broken", spec={**HEALTHY, "name": "broken"}
    )
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # placing its instance needs a lock: refused
    assert reconcile_isolated("broken") == FAILED_DELAY
    assert reconcile_isolated("broken") == FAILED_DELAY
    (event,) = broken.events.filter(reason="ReconcileFailed")  # the same failure, once
    assert event.message.startswith("ConnectionError")
    assert reconcile_isolated("healthy") is None  # settled: zero instances wanted
    assert Service.objects.get(name="healthy").phase == "running"  # 0/0 instances ready
