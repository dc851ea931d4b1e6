"""Instances across hosts (unit.size > 1) on in-memory runtimes with the real database and
Redis: the scheduler places a gang's members together or not at all, each node's agent starts
its member wired to the leader, the gateways see the leader only while every member runs, and
a failure restarts (or re-places) the whole group."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from contracts.routing import SNAPSHOT_KEY, Snapshot
from controlplane.nodes.models import Node
from controlplane.services.choices import DesiredState
from controlplane.services.models import Instance, Service
from tests.fleet_support import FLEET, Fleet
from tests.test_fleet import deploy, update
from workers.runtimes import InstanceError
from workers.scheduling import gangs
from workers.scheduling.gangs import unit_state
from workers.scheduling.scheduler import schedule

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(store, settings, redis_url, tmp_path):
    settings.REDIS_URL = redis_url
    settings.WHARF_MODEL_DIR = tmp_path
    (tmp_path / "m").mkdir()
    return Fleet()


def gang(name: str = "big", size: int = 2, instances: int = 1, **llm) -> dict:
    """vLLM across `size` hosts, one card each, the model split into as many stages."""
    llm = {"engine": "vllm", "model": "m", "pipeline_parallel_size": size, **llm}
    return {"name": name, "unit": {"size": size},
            "metadata": {"instance": instances, "gpu": 1}, "llm": llm}  # fmt: skip


def members(fleet: Fleet, service: str = "big") -> list[Instance]:
    return sorted(fleet.rows(service), key=lambda r: (r.gang, r.rank))


def routed(store, service: str = "big") -> list[str]:
    snapshot = Snapshot.from_json(store.get(SNAPSHOT_KEY))
    found = snapshot.services.get(service)
    return sorted(i.name for i in found.instances) if found else []


def args_of(fleet: Fleet, row: Instance) -> list[str]:
    return list(fleet.runtimes[row.node].requests[row.name].plan.args)


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_members_are_placed_together_wired_to_the_leader_and_only_it_is_routed(fleet, store):
    for name in ("a", "b", "c"):
        fleet.node(name, cards=1)
    deploy(gang())
    fleet.settle()
    leader, member = members(fleet)
    assert (leader.rank, member.rank) == (0, 1) and leader.gang == member.gang == leader.name
    assert leader.node != member.node and leader.devices == member.devices == "gpu:0"
    low, high = FLEET.pd_ports
    assert low <= leader.master_port <= high and member.master_port is None
    leader_ip = Node.objects.get(name=leader.node).address
    for row in (leader, member):
        args = args_of(fleet, row)
        assert flag(args, "--nnodes") == "2" and flag(args, "--node-rank") == str(row.rank)
        assert flag(args, "--master-addr") == leader_ip
        assert flag(args, "--master-port") == str(leader.master_port)
        assert ("--headless" in args) == (row.rank == 1)
        env = fleet.runtimes[row.node].requests[row.name].plan.env
        assert env["VLLM_HOST_IP"] == Node.objects.get(name=row.node).address
    assert (leader.state, member.state) == ("ready", "starting")  # a member is not probed
    assert routed(store) == [leader.name]
    service = Service.objects.get(name="big")
    assert service.ready_instances == 1 and service.phase == "running"


def test_replicas_count_gangs_and_two_gangs_never_share_a_card(fleet):
    for name in ("a", "b", "c", "d"):
        fleet.node(name, cards=1)
    deploy(gang(instances=2))
    fleet.settle()
    rows = members(fleet)
    assert len(rows) == 4 and len({r.gang for r in rows}) == 2
    assert len({r.node for r in rows}) == 4
    assert Service.objects.get(name="big").ready_instances == 2


def test_a_gang_that_fits_only_in_part_stays_pending_with_every_nodes_reason(fleet):
    fleet.node("a", cards=1)
    fleet.node("b", cards=0)
    deploy(gang())
    fleet.settle(2)
    assert fleet.rows("big") == []  # nothing taken by half a gang
    service = Service.objects.get(name="big")
    assert service.phase == "pending"
    assert "a: takes a member, but the instance spans 2 nodes" in service.last_error
    assert "b: " in service.last_error and "gpu" in service.last_error


def test_a_member_that_exits_restarts_the_whole_group_and_leaves_routing(fleet, store):
    for name in ("a", "b"):
        fleet.node(name, cards=1)
    deploy(gang())
    fleet.settle()
    leader, member = members(fleet)
    fleet.runtimes[member.node].exit(member.name)
    now = timezone.now()
    fleet.step(now)
    fleet.step(now)  # the leader's agent stops its engine
    assert {r.state for r in members(fleet)} == {"backoff"}
    assert routed(store) == []
    assert fleet.runtimes[leader.node].list() == []  # no member left running alone
    again = members(fleet)
    assert again[0].restart_at == again[1].restart_at  # they start again together
    assert Service.objects.get(name="big").events.filter(reason="GangRestarting").exists()
    fleet.settle(3, now + timedelta(seconds=11))
    assert [r.state for r in members(fleet)] == ["ready", "starting"]
    assert routed(store) == [leader.name]
    assert fleet.runtimes[leader.node].created.count(leader.name) == 2


def test_a_members_node_that_stops_answering_re_places_the_whole_group(fleet, store):
    for name in ("a", "b", "c"):
        fleet.node(name, cards=1)
    deploy(gang())
    fleet.settle()
    before = members(fleet)
    lost = before[1].node
    kept = before[0].node
    fleet.down.add(lost)
    now = timezone.now() + timedelta(seconds=40)  # past the grace: not_ready
    fleet.settle(4, now)
    after = members(fleet)
    assert {r.node for r in after} == {"a", "b", "c"} - {lost}
    assert not {r.name for r in before} & {r.name for r in after}  # a new gang
    assert [r.state for r in after] == ["ready", "starting"]
    assert routed(store) == [after[0].name]
    # the old leader's engine went with its gang (its node runs only the new member)
    assert {o.name for o in fleet.runtimes[kept].list()} == {
        r.name for r in after if r.node == kept
    }
    assert Service.objects.get(name="big").events.filter(reason="InstanceLost").exists()


def test_draining_a_members_node_moves_the_whole_group(fleet):
    for name in ("a", "b", "c", "d"):
        fleet.node(name, cards=1)
    deploy(gang())
    fleet.settle()
    old = members(fleet)
    Node.objects.filter(name=old[1].node).update(cordoned=True, draining=True)
    fleet.settle(8)
    new = members(fleet)
    assert len(new) == 2 and not {r.name for r in old} & {r.name for r in new}
    assert old[1].node not in {r.node for r in new}
    assert [r.state for r in new] == ["ready", "starting"]
    for row in old:
        assert fleet.runtimes[row.node].instances.get(row.name) is None


def test_an_update_rolls_the_group_as_one_instance(fleet):
    for name in ("a", "b", "c", "d"):
        fleet.node(name, cards=1)
    deploy(gang())
    fleet.settle()
    old = {r.name for r in members(fleet)}
    update("big", gang(max_model_len=1024))
    fleet.step()
    rows = members(fleet)
    assert len({r.gang for r in rows}) == 2  # surge 1: one new gang beside the old one
    assert {r.state for r in rows if r.name in old} == {"ready", "starting"}  # still serving
    fleet.settle(8)
    rows = members(fleet)
    assert len(rows) == 2 and not old & {r.name for r in rows}
    assert Service.objects.get(name="big").ready_instances == 1


def test_a_single_host_instance_is_unchanged(fleet, store):
    fleet.node("a", cards=1)
    deploy({"name": "one", "metadata": {"gpu": 1}, "llm": {"engine": "vllm", "model": "m"}})
    fleet.settle()
    (row,) = fleet.rows("one")
    assert (row.gang, row.rank, row.master_port) == ("", 0, None)
    assert "--nnodes" not in args_of(fleet, row)
    assert routed(store, "one") == [row.name]
    schedule("one", FLEET)


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        (("ready", "starting"), "ready"),  # members are not probed: the leader's readiness
        (("ready", "backoff"), "backoff"),
        (("backoff", "starting"), "backoff"),
        (("ready", "draining"), "draining"),
        (("starting", "creating"), "creating"),
        (("ready", "unknown"), "unknown"),
        (("failed", "backoff"), "failed"),
    ],
)
def test_a_gang_is_as_well_as_its_worst_member(states, expected):
    rows = [
        Instance(name="g" if rank == 0 else f"g-{rank}", gang="g", rank=rank, state=state,
                 node=f"n{rank}", spec_hash="h")
        for rank, state in enumerate(states)
    ]  # fmt: skip
    (member,) = gangs.as_rollout_members(rows, draining_nodes={"n1"})
    assert (member.name, member.state, member.movable) == ("g", expected, True)
    assert unit_state(rows) == expected


def test_a_member_that_cannot_start_fails_the_whole_group(fleet, store):
    for name in ("a", "b"):
        fleet.node(name, cards=1)

    def refuse(request):
        raise InstanceError("no such image on this node")

    fleet.runtimes["b"].create = refuse  # type: ignore[method-assign]
    deploy(gang())
    fleet.settle(3)
    rows = members(fleet)
    assert [r.state for r in rows] == ["failed", "failed"]
    assert {r.node for r in rows} == {"a", "b"}
    assert "no such image" in " ".join(r.message for r in rows)
    assert fleet.runtimes["a"].created and fleet.runtimes["a"].list() == []  # not alone
    assert routed(store) == []
    assert Service.objects.get(name="big").phase == "failed"


def test_a_draining_gang_on_a_node_gone_for_good_is_removed(fleet):
    for name in ("a", "b"):
        fleet.node(name, cards=1)
    deploy(gang())
    fleet.settle()
    leader, member = members(fleet)
    fleet.down.add(member.node)
    Service.objects.filter(name="big").update(desired_state=DesiredState.STOPPED)
    fleet.step()  # both drain; the leader's agent stops it, the member's node does not answer
    assert [(r.name, r.state) for r in members(fleet)] == [(member.name, "draining")]
    fleet.step(timezone.now() + timedelta(seconds=40))  # not_ready: a drain stays a drain
    assert [r.state for r in members(fleet)] == ["draining"]
    fleet.settle(2, timezone.now() + timedelta(seconds=100))  # past the eviction grace
    assert members(fleet) == []


def test_deleting_one_member_replaces_the_whole_group(fleet, store):
    for name in ("a", "b", "c", "d"):
        fleet.node(name, cards=1)
    deploy(gang())
    fleet.settle()
    old = members(fleet)
    Instance.objects.filter(pk=old[1].pk).update(state="draining", draining_since=timezone.now())
    fleet.settle(6)
    new = members(fleet)
    assert len(new) == 2 and not {r.name for r in old} & {r.name for r in new}
    assert [r.state for r in new] == ["ready", "starting"]
    assert routed(store) == [new[0].name]
    for row in old:  # nothing of the old gang runs
        assert row.name not in fleet.runtimes[row.node].instances
