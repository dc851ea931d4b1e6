"""The scheduler and the node agents together, on in-memory runtimes (workers.runtimes.memory)
with the real database and Redis: placement across nodes, rolling updates, drain, back-off,
dead and returning nodes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from contracts.inflight import encode_report, report_key
from contracts.routing import SNAPSHOT_KEY, Snapshot
from controlplane.nodes.models import Node
from controlplane.services import routing
from controlplane.services.choices import DesiredState
from controlplane.services.models import Instance, Service
from controlplane.services.versions import record_version
from controlplane.tokens.models import ApiKey
from tests.api_support import default_workspace, grant, published
from tests.fleet_support import FLEET, Fleet
from workers.nodes.agent import converge
from workers.nodes.checks import after_readiness
from workers.nodes.probes import RECHECK, Probe, next_pass_in
from workers.nodes.starter import start_instance
from workers.scheduling.scheduler import schedule

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(store, settings, redis_url):
    settings.REDIS_URL = redis_url
    return Fleet()


def custom(name: str, instances: int = 1, gpu: int = 0, **extra) -> dict:
    return {"name": name, "containers": [{"image": "none", "command": "exec sleep 300",
            "port": 8000}], "metadata": {"instance": instances, "gpu": gpu}, **extra}  # fmt: skip


def deploy(spec: dict) -> Service:
    with transaction.atomic():
        service = Service.objects.create(
            workspace=default_workspace(), name=spec["name"], spec=spec
        )
        record_version(service, spec, "created")
    return service


def update(name: str, spec: dict) -> None:
    with transaction.atomic():
        service = Service.objects.get(name=name)
        Service.objects.filter(pk=service.pk).update(spec=spec, generation=service.generation + 1)
        record_version(service, spec, "updated")


def service(name: str) -> Service:
    return Service.objects.get(name=name)


def test_replicas_spread_and_no_card_is_given_twice(fleet):
    for name in ("a", "b", "c"):
        fleet.node(name, cards=3)
    deploy(custom("web", instances=3, gpu=1))
    fleet.settle()
    deploy(custom("big", instances=1, gpu=2))
    fleet.settle()
    assert sorted(node for node, _ in fleet.states("web")) == ["a", "b", "c"]
    held = [(r.node, r.devices) for s in ("web", "big") for r in fleet.rows(s)]
    cards = [(node, card) for node, devices in held for card in devices[4:].split(",")]
    assert len(cards) == len(set(cards)) == 5
    assert service("web").phase == "running" and service("big").phase == "running"


def test_a_spec_too_big_for_any_node_stays_pending_saying_why_per_node(fleet):
    fleet.node("a", cards=2)
    fleet.node("b", cards=4, cordoned=True)
    deploy(custom("huge", gpu=4))
    fleet.settle(3)
    huge = service("huge")
    assert huge.phase == "pending" and fleet.rows("huge") == []
    assert "a: 2 free gpu of 2, needs 4" in huge.last_error and "b: cordoned" in huge.last_error
    assert huge.events.filter(reason="InsufficientResources").count() == 1


def test_an_update_starts_new_instances_before_draining_old_ones(fleet):
    fleet.node("a", cards=4)
    deploy(custom("web", instances=2))
    fleet.settle()
    old = {r.name for r in fleet.rows("web")}
    changed = custom("web", instances=2)
    changed["containers"][0]["env"] = [{"name": "V", "value": "2"}]
    update("web", changed)
    seen_ready = []
    for _ in range(12):
        fleet.step()
        rows = fleet.rows("web")
        seen_ready.append(sum(r.state == "ready" for r in rows))
        assert len([r for r in rows if r.state != "draining"]) <= 3  # surge 1
    assert min(seen_ready) >= 2, seen_ready  # never fewer ready than replicas
    assert not old & {r.name for r in fleet.rows("web")}
    assert service("web").phase == "running"


def test_a_broken_version_pauses_the_rollout_and_a_rollback_restores_the_old_spec(fleet):
    fleet.node("a")
    original = custom("web", instances=2)
    deploy(original)
    fleet.settle()
    update("web", {**custom("web", instances=2), "containers": [{"image": "none",
           "command": "exit 3", "port": 8000}]})  # fmt: skip
    fleet.healthy = False
    runtime = fleet.runtimes["a"]
    for _ in range(4):
        fleet.step()
        for row in fleet.rows("web"):
            if row.state == "starting" and row.name in runtime.instances:
                runtime.exit(row.name, 3)
    web = service("web")
    assert web.phase == "updating" and "rollout paused" in web.progress
    assert [r.state for r in fleet.rows("web")].count("ready") == 2  # the old ones serve on
    assert web.events.filter(reason="RolloutPaused").exists()
    update("web", original)  # what a rollback does
    fleet.healthy = True
    fleet.settle()
    assert [r.state for r in fleet.rows("web")] == ["ready", "ready"]
    assert service("web").phase == "running"


def test_a_crashed_engine_restarts_after_a_growing_back_off(fleet):
    fleet.node("a")
    deploy(custom("web"))
    fleet.settle()
    runtime, now = fleet.runtimes["a"], timezone.now()
    delays = []
    for _ in range(3):
        (row,) = fleet.rows("web")
        runtime.exit(row.name, 1)
        fleet.step(now)
        (row,) = fleet.rows("web")
        assert row.state == "backoff"
        delays.append(round((row.restart_at - now).total_seconds()))
        fleet.step(now + timedelta(seconds=delays[-1] - 1))
        assert fleet.rows("web")[0].state == "backoff"  # not before its time
        now += timedelta(seconds=delays[-1] + 1)
        fleet.settle(3, now)
        assert fleet.rows("web")[0].state == "ready"
    assert delays == [10, 20, 40]
    exits = service("web").events.filter(reason="InstanceExited").order_by("id")
    assert [e.message.split("; ")[1] for e in exits] == [
        "restart 1 in 10 s", "restart 2 in 20 s", "restart 3 in 40 s"]  # fmt: skip


def test_a_dead_nodes_instances_move_and_its_return_runs_nothing_twice(fleet):
    fleet.node("a")
    fleet.node("b")
    deploy(custom("web", instances=2))
    fleet.settle()
    lost = [r.name for r in fleet.rows("web") if r.node == "a"]
    fleet.down.add("a")
    now = timezone.now() + timedelta(seconds=40)  # past the first grace: unknown
    fleet.step(now)
    assert dict(fleet.states("web"))["a"] == "unknown"
    fleet.settle(4, now + timedelta(seconds=60))  # past the second: placed elsewhere
    assert [node for node, state in fleet.states("web")] == ["b", "b"]
    fleet.down.discard("a")
    fleet.settle(2, now + timedelta(seconds=61))
    assert fleet.runtimes["a"].list() == []  # it removed what is no longer assigned to it
    assert set(lost) <= set(service("web").events.filter(reason="InstanceLost")
                            .values_list("instance", flat=True))  # fmt: skip


def test_drain_waits_for_the_requests_in_flight(fleet, redis_url):
    import redis

    fleet.node("a")
    deploy(custom("web"))
    fleet.settle()
    (row,) = fleet.rows("web")
    gateway = redis.Redis.from_url(redis_url)
    key = report_key("test-gateway")
    # a gateway that serves a snapshot taken after the drain, with one request still going
    later = int((timezone.now() + timedelta(seconds=5)).timestamp() * 1000)
    gateway.set(key, encode_report(0, later, {row.name: 1}), ex=30)
    try:
        Service.objects.filter(name="web").update(desired_state=DesiredState.STOPPED)
        fleet.settle(3)
        assert fleet.states("web") == [("a", "draining")]
        assert row.name in fleet.runtimes["a"].instances  # still serving its request
        gateway.set(key, encode_report(0, later, {}), ex=30)
        fleet.settle(2)
        assert fleet.rows("web") == [] and fleet.runtimes["a"].list() == []
        assert service("web").phase == "stopped"
    finally:
        gateway.delete(key)


def test_a_draining_node_is_emptied_replacements_first(fleet):
    fleet.node("a")
    fleet.node("b", cordoned=True)
    deploy(custom("web"))
    fleet.settle()
    assert fleet.states("web") == [("a", "ready")]
    Node.objects.filter(name="b").update(cordoned=False)
    Node.objects.filter(name="a").update(cordoned=True, draining=True)
    fleet.step()
    assert sorted(fleet.states("web")) == [("a", "ready"), ("b", "starting")]
    fleet.settle()
    assert fleet.states("web") == [("b", "ready")]


def test_a_node_that_holds_the_model_is_preferred(fleet):
    fleet.node("a")
    fleet.node("b", cached_models=["tiny-llama"])
    deploy({"name": "llm", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}})
    fleet.step()  # the placement, whatever comes of the start
    assert [node for node, _ in fleet.states("llm")] == ["b"]


def test_a_new_intent_retries_an_instance_that_could_not_start(fleet):
    fleet.node("a")
    spec = {"name": "llm", "llm": {"engine": "vllm-cpu", "model": "not-in-the-store"}}
    deploy(spec)
    fleet.settle(3)
    assert fleet.states("llm") == [("a", "failed")] and service("llm").phase == "failed"
    failed = fleet.rows("llm")[0].name
    update("llm", spec)  # the same spec again (the store may have the model now)
    fleet.step()
    assert failed not in {r.name for r in fleet.rows("llm")}


def test_a_probe_that_ends_after_a_drain_leaves_the_instance_draining(fleet):
    """The agent writes a probe's result over the state it read, never over a drain the
    scheduler wrote while the probe ran: else the instance is routed again and drained again,
    and its drain waits for a snapshot that never comes (the whole grace)."""
    fleet.node("a")
    deploy(custom("web"))
    fleet.settle()
    (read,) = fleet.rows("web")  # what the agent's pass read before probing
    assert read.state == "ready"
    Service.objects.filter(name="web").update(desired_state=DesiredState.STOPPED)
    schedule("web", FLEET)  # drained while the probe runs
    after_readiness(read, None, True, Probe(), fleet.runtimes["a"], FLEET, timezone.now(), None)
    assert fleet.states("web") == [("a", "draining")]
    schedule("web", FLEET)
    assert service("web").events.filter(reason="InstanceDraining").count() == 1


def test_draining_an_instance_that_was_not_routed_publishes_a_newer_snapshot(fleet, store):
    """A drain is over once every gateway serves a snapshot as new as the drain; removing an
    instance that was not routed changes no route, yet a snapshot must still be published."""
    fleet.node("a")
    fleet.healthy = False
    deploy(custom("web"))
    fleet.settle(2)
    assert fleet.states("web") == [("a", "starting")]  # never ready: never routed
    Service.objects.filter(name="web").update(desired_state=DesiredState.STOPPED)
    schedule("web", FLEET)
    (row,) = fleet.rows("web")
    version = Snapshot.from_json(store.get(SNAPSHOT_KEY)).version
    assert row.state == "draining" and version >= row.draining_since.timestamp() * 1000


def test_a_node_starts_nothing_its_workspace_is_no_longer_granted(fleet):
    """Staff revoked the NFS export after the service was saved: the node checks the grants
    again before it stages or mounts anything, and says which one is missing."""
    fleet.node("a")
    grant(nfs=["nas:/exports"])
    nfs = {"mount_path": "/data", "nfs": {"server": "nas", "path": "/exports/m"}}
    deploy(custom("shared", storage=[nfs]))
    grant()  # revoked before any node started it
    fleet.settle(3)
    assert fleet.states("shared") == [("a", "failed")]
    message = fleet.rows("shared")[0].message
    assert message.startswith("not granted to its workspace: storage[0].nfs")
    assert "grants.nfs" in message and fleet.runtimes["a"].list() == []
    grant(nfs=["nas:/exports"])
    update("shared", custom("shared", storage=[nfs]))
    fleet.settle(3)
    assert fleet.states("shared") == [("a", "ready")]


def test_placement_counts_what_each_service_reserves_as_of_its_latest_spec(fleet):
    fleet.node("a", cpus=4)
    deploy(custom("web", metadata={"instance": 1, "cpu": 3}))
    fleet.settle()
    deploy(custom("batch", metadata={"instance": 1, "cpu": 2}))
    fleet.settle(3)
    assert fleet.rows("batch") == [] and "a: 1 free CPUs, needs 2" in service("batch").last_error
    smaller = custom("web", metadata={"instance": 1, "cpu": 1})
    update("web", smaller)  # a new generation: its instances now reserve 1 each
    fleet.settle()
    assert [state for _, state in fleet.states("web")] == ["ready"]
    assert [state for _, state in fleet.states("batch")] == ["ready"]


def test_a_pass_publishes_its_own_entry_alone_and_builds_only_when_it_must(
    fleet, store, monkeypatch
):
    """The build reads the whole fleet: a pass whose service's entry is the one the gateways
    already have writes nothing; one that changed its routes replaces that entry alone, and
    the snapshot is then what a whole build makes; one that finds the published snapshot is
    not the one the entries describe builds."""
    builds = []
    build = routing.build_snapshot
    monkeypatch.setattr(routing, "build_snapshot", lambda: builds.append(1) or build())
    fleet.node("a")
    deploy(custom("web"))
    deploy(custom("api"))
    fleet.settle()
    (ready,) = published(store).services["web"].instances
    before = published(store).version
    builds.clear()
    schedule("web", FLEET)
    schedule("web", FLEET)
    assert builds == [] and published(store).version == before  # nothing changed
    Instance.objects.filter(name=ready.name).update(state="unknown")  # out of routing
    schedule("web", FLEET)
    patched = published(store)
    assert builds == [] and patched.version > before
    assert patched.services["web"].instances == () and patched.services["api"].instances
    assert _as_built(patched, build())
    schedule("web", FLEET)
    assert builds == [] and published(store).version == patched.version  # patched as it is
    routing.publish_for("web", force=True)  # a drain's: a newer version, routes unchanged
    assert builds == [] and published(store).version > patched.version
    assert _as_built(published(store), build())
    # A service that comes or goes: its entry, and the keys for every service of its workspace.
    owner = get_user_model().objects.create_user("key-owner")
    key, _ = ApiKey.issue(owner, default_workspace(), "every service")
    deploy(custom("new"))
    schedule("new", FLEET)
    assert builds == [] and _as_built(published(store), build())
    assert published(store).keys[key.digest].services == {"api", "new", "web"}
    Service.objects.filter(name="api").update(desired_state=DesiredState.DELETED)
    Instance.objects.filter(service__name="api").delete()
    schedule("api", FLEET)  # its last pass: every instance gone, the service deleted
    assert builds == [] and _as_built(published(store), build())
    assert "api" not in published(store).services
    assert published(store).keys[key.digest].services == {"new", "web"}
    store.set(SNAPSHOT_KEY, Snapshot(version=1).to_json())  # written by something else
    schedule("web", FLEET)
    assert builds == [1] and "web" in published(store).services


def _as_built(patched: Snapshot, built: Snapshot) -> bool:
    """A patched snapshot routes as a whole build does (their versions differ)."""
    return (patched.services, patched.keys, patched.groups) == (
        built.services, built.keys, built.groups)  # fmt: skip


def test_an_engine_starting_brings_its_agent_back_within_its_starting_period(fleet):
    """An engine just started is first checked a second on, and while it does not answer,
    again a second later, not at the agent's next pass two seconds on (probes.RECHECK): it
    is routed as soon as it answers. Once it is ready, the agent keeps to its interval."""
    fleet.node("a")
    deploy(custom("web"))
    schedule("web", FLEET)
    runtime, clock = fleet.runtimes["a"], {}

    def agent_pass(now=None) -> None:
        converge("a", runtime, FLEET, lambda name: start_instance(name, "a", runtime, FLEET),
                 now=now, check=runtime.check, probe_clock=clock)  # fmt: skip

    started = timezone.now()
    agent_pass(started)  # starts its engine: back a second later to check it
    assert clock[RECHECK] == pytest.approx(started.timestamp() + 1.0, abs=0.2)
    began = started + timedelta(seconds=1.0)
    agent_pass(began)  # checks it: no answer yet
    assert fleet.states("web") == [("a", "starting")]
    assert clock[RECHECK] == pytest.approx(began.timestamp() + 1.0, abs=1e-3)
    assert next_pass_in(clock, began.timestamp(), FLEET.agent_interval) == pytest.approx(1.0)
    assert next_pass_in(clock, began.timestamp() + 1.5, FLEET.agent_interval) == 0.0
    runtime.make_healthy()
    agent_pass(began + timedelta(seconds=1.0))
    assert fleet.states("web") == [("a", "ready")]
    assert RECHECK not in clock
    assert next_pass_in(clock, began.timestamp() + 1.0, FLEET.agent_interval) == 2.0
