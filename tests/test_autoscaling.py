"""The autoscaler's loop with the scheduler and node agents (in-memory runtimes), the real
database and Redis: gateways' reports and engines' samples in, counts, events and instances
out; each role of a prefill/decode service on its own signals; scale to zero and waking;
the routing snapshot's fields."""

from __future__ import annotations

import json
import time

import pytest
import redis

from contracts import engine_load
from contracts.inflight import encode_report, report_key
from contracts.routing import SNAPSHOT_KEY
from controlplane.queues import store as queue_store
from controlplane.queues.models import QueueItem
from controlplane.services.models import Event, Service
from tests.fleet_support import Fleet
from tests.test_fleet import custom, deploy, update
from workers.scaling.autoscaling import autoscale_all

pytestmark = pytest.mark.django_db
QPS = [{"metricName": "qps", "threshold": 2}]


@pytest.fixture
def fleet(store, settings, redis_url, tmp_path):
    settings.REDIS_URL = redis_url
    settings.WHARF_MODEL_DIR = tmp_path
    (tmp_path / "tiny-llama").mkdir()
    fleet = Fleet()
    fleet.node("a")
    return fleet


@pytest.fixture
def gateway(redis_url):
    client = redis.Redis.from_url(redis_url)
    yield client
    client.delete(report_key("test-gw"))
    for key in client.scan_iter(match=engine_load.LATEST_PREFIX + "*"):
        client.delete(key)


def report(client, qps=None, in_flight=None, held=None) -> None:
    """A gateway's report; it serves every snapshot, so drains wait only for in_flight."""
    later = int(time.time() * 1000) + 60_000
    client.set(report_key("test-gw"), encode_report(time.time(), later, in_flight or {}, qps,
               held), ex=30)  # fmt: skip


def scaled(name: str, min_=1, max_=3, strategies=QPS, down=0, grace=600, **extra) -> dict:
    return custom(name, autoscaler={
        "min": min_, "max": max_, "scaleStrategies": strategies,
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": down},
                     "onZero": {"scaleDownGracePeriodSeconds": grace}}}, **extra)  # fmt: skip


def events(name: str) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in Event.objects.filter(service__name=name)
            if e.reason.startswith("Scaled")][::-1]  # fmt: skip


def test_load_through_the_gateways_adds_instances_and_its_end_removes_them(fleet, gateway):
    deploy(scaled("web"))
    fleet.settle()
    assert len(fleet.rows("web")) == 1
    report(gateway, qps={"web": 5.0})  # 5 requests/s on 1 instance, 2 each wanted → 3
    assert autoscale_all(gateway) == {"web"}
    fleet.settle()
    assert [s for _, s in fleet.states("web")] == ["ready"] * 3
    web = Service.objects.get(name="web")
    assert web.autoscale[""]["replicas"] == 3 and web.phase == "running"
    # a scale-up is no degradation: running throughout
    assert not Event.objects.filter(service=web, reason="Degraded").exists()
    assert events("web") == [("ScaledUp", "instances: 1 → 3: qps 5.00/instance against 2 over "
                              "1 ready → 3")]  # fmt: skip
    report(gateway, qps={"web": 5.5})  # 1.83 each: within the tolerance, nothing changes
    assert autoscale_all(gateway) == set()
    report(gateway, qps={})
    assert autoscale_all(gateway) == {"web"}  # no down window here: at once, to min
    fleet.settle()
    assert len(fleet.rows("web")) == 1
    assert events("web")[-1][0] == "ScaledDown"


def test_engine_queues_scale_each_role_of_a_prefill_decode_service_on_its_own(fleet, gateway):
    queue = [{"metricName": "queue", "threshold": 1}]
    spec = {"name": "pd", "llm": {"engine": "vllm-cpu", "model": "tiny-llama", "pd": {
        "prefill": {}, "decode": {"autoscaler": {"min": 1, "max": 2, "scaleStrategies": queue}}}},
        "autoscaler": {"min": 1, "max": 2, "scaleStrategies": queue}}  # fmt: skip
    deploy(spec)
    fleet.settle()
    rows = {r.role: r for r in fleet.rows("pd")}
    assert set(rows) == {"prefill", "decode"}
    now = time.time()
    for role, waiting in (("prefill", 0), ("decode", 4)):
        sample = engine_load.encode({"at": now, "waiting": waiting, "running": 1, "kv_cache": 0.1})
        gateway.set(engine_load.latest_key(rows[role].name), sample, ex=engine_load.STALE)
    assert autoscale_all(gateway, now=now) == {"pd"}
    autoscale = Service.objects.get(name="pd").autoscale
    assert (autoscale["prefill"]["replicas"], autoscale["decode"]["replicas"]) == (1, 2)
    assert "decode: 1 → 2: queue 4.00/instance" in events("pd")[0][1]
    # a sample older than STALE counts for nothing
    old = engine_load.encode({"at": now - 60, "waiting": 9})
    gateway.set(engine_load.latest_key(rows["prefill"].name), old, ex=engine_load.STALE)
    assert autoscale_all(gateway, now=now) == set()


def test_an_idle_min_zero_service_stops_and_a_held_request_wakes_it(fleet, gateway, redis_url):
    deploy(scaled("idle", min_=0, grace=0))
    fleet.settle()
    assert len(fleet.rows("idle")) == 1
    snapshot = json.loads(redis.Redis.from_url(redis_url).get(SNAPSHOT_KEY))
    assert snapshot["services"]["idle"]["scale_from_zero"] is True
    report(gateway)  # a gateway with nothing for it
    assert autoscale_all(gateway) == {"idle"}
    fleet.settle()
    assert fleet.rows("idle") == []
    idle = Service.objects.get(name="idle")
    assert idle.phase == "running" and idle.autoscale[""]["replicas"] == 0
    report(gateway, held={"idle": 2})
    assert autoscale_all(gateway) == {"idle"}
    fleet.settle()
    assert [s for _, s in fleet.states("idle")] == ["ready"]
    reasons = [reason for reason, _ in events("idle")]
    assert reasons == ["ScaledToZero", "ScaledFromZero"]
    assert (
        events("idle")[1][1] == "instances: 0 → 1: 2 request(s) held while no instance runs; waking"
    )


def test_an_async_service_scales_on_its_queue_to_zero_and_back(fleet, gateway):
    """Its `queue` metric is its backlog per instance: items waiting or in work."""
    spec = scaled("sd", min_=0, max_=3, grace=0,
                  strategies=[{"metricName": "queue", "threshold": 2}])  # fmt: skip
    spec["metadata"]["type"] = "Async"
    service = deploy(spec)
    fleet.settle()
    queue = queue_store.queue_of(service, "input")
    for _ in range(6):
        queue_store.put(queue, b"{}", tags={})
    report(gateway)  # nothing through the gateways: the queue is the load
    assert autoscale_all(gateway) == {"sd"}
    fleet.settle()
    assert len(fleet.rows("sd")) == 3  # 6 items, 2 per instance
    QueueItem.objects.all().delete()  # answered and taken
    assert autoscale_all(gateway) == {"sd"}
    fleet.settle()
    assert fleet.rows("sd") == []
    queue_store.put(queue, b"{}", tags={})
    assert autoscale_all(gateway) == {"sd"}
    assert events("sd")[-1][1] == (
        "instances: 0 → 1: 1 item(s) in its queue while no instance runs; waking"
    )


def test_removing_the_autoscaler_returns_to_the_specs_count(fleet, gateway):
    deploy(scaled("web", max_=3))
    fleet.settle()
    report(gateway, qps={"web": 50.0})
    autoscale_all(gateway)
    fleet.settle()
    assert len(fleet.rows("web")) == 3
    update("web", custom("web", instances=2))
    autoscale_all(gateway)
    assert Service.objects.get(name="web").autoscale == {}
    fleet.settle()
    assert len(fleet.rows("web")) == 2


def test_the_snapshot_carries_the_routing_policy_and_session_header(fleet, redis_url):
    deploy(custom("sticky", metadata={"rpc": {"routing": "session", "session_header": "x-user"}}))
    fleet.settle()
    entry = json.loads(redis.Redis.from_url(redis_url).get(SNAPSHOT_KEY))["services"]["sticky"]
    assert (entry["routing"], entry["session_header"], entry["scale_from_zero"]) == (
        "session", "x-user", False)  # fmt: skip
