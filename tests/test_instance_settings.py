"""EAS's settings of how an instance runs and is placed (contracts.spec_instance): the schema
and its spellings in tables, placement by disk, QoS and spread as pure code, and through the
scheduler and node agents (in-memory runtimes, the real database): a crash kept as it ended,
SIGTERM at the start of a drain; the warnings an answer gives."""

from __future__ import annotations

import json

import pytest

from contracts import spec_facts
from contracts.eas import normalise
from contracts.kube.pod_template import cpu_and_memory
from contracts.spec import SpecError, parse_spec
from contracts.spec_instance import disk_mb, notes
from tests.fleet_support import Fleet
from tests.test_fleet import custom, deploy, service, update
from workers.scheduling.placement import Card, Held, Need, NodeOffer, Placed, Unplaced, place

BASE = {"name": "web", "containers": [{"image": "img", "command": "serve", "port": 8000}]}


def spec_of(**metadata):
    return parse_spec(normalise({**BASE, "metadata": metadata}))


@pytest.mark.parametrize(
    ("text", "mb"),
    [("40Gi", 40960), ("512Mi", 512), ("1Ti", 1048576), ("30", 30720), ("100G", 95368),
     ("1M", 1)],
)  # fmt: skip
def test_a_disk_is_read_as_kubernetes_writes_it(text, mb):
    assert disk_mb(text) == mb


@pytest.mark.parametrize(
    ("metadata", "field", "words"),
    [
        ({"disk": "forty"}, "metadata.disk", "not a size"),
        ({"disk": "0Gi"}, "metadata.disk", "between"),
        ({"gpu_core_percentage": 50}, "metadata", "give both"),
        ({"qos": "Burstable"}, "metadata.qos", "BestEffort"),
        ({"type": "Queue"}, "metadata.type", "queue services are not available"),
        ({"type": "Batch"}, "metadata.type", "not a kind of service EAS documents"),
        ({"scheduling": {"spread": {"policy": "rack"}}}, "metadata.scheduling.spread.policy",
         "host"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_refused_naming_the_field(metadata, field, words):
    with pytest.raises(SpecError) as caught:
        spec_of(**metadata)
    assert field in caught.value.errors, caught.value.errors
    assert words in json.dumps(caught.value.errors[field])


def test_eas_spellings_land_in_one_place_and_defaults_keep_earlier_hashes():
    sent = {**BASE, "metadata": {"rpc.enable_sigterm": "true", "enable_grpc": "false"},
            "runtime": {"enable_crash_block": "true"}, "scheduling": {"spread": {"policy": "host"}},
            "networking": {"enable_grpc": "false"}}  # fmt: skip
    spec = parse_spec(normalise(sent))
    meta = spec.metadata
    assert meta.rpc is not None and meta.rpc.enable_sigterm and meta.enable_crash_block
    assert spec_facts.spread_policy(spec) == "host"
    plain = parse_spec(normalise(BASE)).spec_hash()
    # what only the agent and the gateway act on leaves the hash; defaults leave it as it was
    assert parse_spec(normalise({**sent, "scheduling": {}})).spec_hash() == plain
    assert spec_of(qos="", enable_grpc=False, type="Standard").spec_hash() == plain
    # what places an instance differently moves it
    for moved in (spec_of(disk="40Gi"), spec_of(qos="BestEffort"), spec):
        assert moved.spec_hash() != plain


def test_a_gpu_slice_gets_a_whole_card_and_the_answer_says_so():
    assert spec_of(gpu_memory=10).metadata.gpu == 1
    assert spec_of(gpu_memory=10, gpu_core_percentage=30, gpu=2).metadata.gpu == 2
    warned = notes(normalise({**BASE, "metadata": {"gpu_memory": "10", "gpu_core_percentage": 30}}))
    assert [w["field"] for w in warned] == ["metadata.gpu_memory", "metadata.gpu_core_percentage"]
    assert "one whole card" in warned[0]["message"]
    (grpc,) = notes(normalise({**BASE, "metadata": {"enable_grpc": "true"}}))
    assert grpc["field"] == "metadata.enable_grpc" and "not gRPC" in grpc["message"]


def test_best_effort_reserves_no_cpu_and_a_disk_is_requested_on_kubernetes():
    from contracts.engines.plan import ContainerPlan

    plan = ContainerPlan(image="img", args=["serve"], port=8000, cpus=4.0,
                         memory_bytes=8 * 2**30)  # fmt: skip
    guaranteed, best = spec_of(cpu=4, disk="40Gi"), spec_of(cpu=4, qos="BestEffort")
    assert spec_facts.reserved_cpu(guaranteed) == 4 and spec_facts.reserved_cpu(best) == 0
    pod = cpu_and_memory(guaranteed, plan)
    assert pod["requests"]["ephemeral-storage"] == pod["limits"]["ephemeral-storage"] == "40960Mi"
    pod = cpu_and_memory(best, plan)
    assert pod["requests"]["cpu"] == "0" and pod["limits"]["cpu"] == "4"
    assert "ephemeral-storage" not in pod["requests"]


def offer(name: str, zone: str = "", **fields) -> NodeOffer:
    return NodeOffer(name, (Card("gpu", 0, 80000),), labels={"zone": zone} if zone else {},
                     **fields)  # fmt: skip


@pytest.mark.parametrize(
    ("needs", "nodes", "holds", "where"),
    [
        # disk: the node with room; what instances there asked for counts
        ([Need("i1", "s", disk_mb=40960)],
         [offer("a", disk_mb=30720), offer("b", disk_mb=102400)], [], {"i1": "b"}),
        ([Need("i1", "s", disk_mb=40960)], [offer("a", disk_mb=102400), offer("b", disk_mb=51200)],
         [Held("a", "o", disk_mb=80000)], {"i1": "b"}),
        # spread host: one per node, however the rest ranks
        ([Need(f"i{i}", "s", spread="host") for i in range(3)], [offer("a"), offer("b")],
         [Held("a", "s")], {"i0": "b", "i1": None, "i2": None}),
        # spread zone: the emptier zone first, even onto a node that has one already
        ([Need("i1", "s", spread="zone")],
         [offer("a", "z1"), offer("b", "z1"), offer("c", "z2")],
         [Held("c", "s"), Held("a", "s"), Held("b", "s"), Held("b", "s")], {"i1": "c"}),
        ([Need("i1", "s")],  # default: the fewest on the node, zones aside
         [offer("a", "z1"), offer("b", "z1"), offer("c", "z2")],
         [Held("c", "s"), Held("c", "s"), Held("b", "s")], {"i1": "a"}),
    ],
)  # fmt: skip
def test_disk_and_spread_decide_the_node(needs, nodes, holds, where):
    results = {r.key: r for r in place(needs, nodes, holds)}
    for key, node in where.items():
        result = results[key]
        assert (result.node if isinstance(result, Placed) else None) == node


def test_a_refusal_names_the_disk_and_the_spread():
    [result] = place([Need("i1", "s", disk_mb=4096, spread="host")],
                     [offer("a", disk_mb=2048)], [Held("a", "s")])  # fmt: skip
    assert isinstance(result, Unplaced)
    assert result.message() == ("a: 2048 MB free disk, needs 4096 and runs an instance of s "
                                "already (spread.policy host)")  # fmt: skip


pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(store) -> Fleet:
    fleet = Fleet()
    fleet.node("a")
    return fleet


def test_a_crash_block_keeps_the_instance_as_it_ended(fleet):
    deploy(normalise({**custom("web"), "runtime": {"enable_crash_block": True}}))
    fleet.settle()
    (row,) = fleet.rows("web")
    runtime = fleet.runtimes["a"]
    runtime.exit(row.name, 3)
    fleet.settle()
    (kept,) = fleet.rows("web")
    assert (kept.name, kept.state) == (row.name, "failed")  # not restarted, not replaced
    assert row.name in runtime.instances  # its container (and logs) left as they were
    assert "exited with code 3; kept as it ended" in kept.message
    web = service("web")
    assert web.phase == "failed" and "enable_crash_block" in web.last_error
    assert web.events.filter(reason="InstanceCrashBlocked").exists()
    assert not web.events.filter(reason="InstanceExited").exists()
    update("web", custom("web"))  # a new intent starts it again
    fleet.settle()
    assert [s for _, s in fleet.states("web")] == ["ready"]


def test_sigterm_goes_out_as_a_drain_starts_and_the_ended_instance_goes(fleet):
    spec = {**custom("web", instances=2), "metadata": {"instance": 2, "rpc.enable_sigterm": True}}
    deploy(normalise(spec))
    fleet.settle()
    assert len(fleet.rows("web")) == 2
    update("web", normalise({**spec, "metadata": {"instance": 1, "rpc.enable_sigterm": True}}))
    fleet.step()  # the scheduler drains one; the agent signals it at once
    signalled = service("web").events.filter(reason="InstanceSignalled")
    assert signalled.count() == 1
    fleet.settle(2)  # it ended (the in-memory engine ends on SIGTERM): removed
    assert len(fleet.rows("web")) == 1
    assert signalled.count() == 1  # once
    assert service("web").events.filter(reason="InstanceRemoved").count() == 1


def test_a_process_instance_gets_sigterm_and_a_node_reports_its_disk(tmp_path):
    import time

    from contracts.engines.plan import ContainerPlan
    from workers.nodes.node import disk_mb as node_disk_mb
    from workers.runtimes.base import InstanceRequest
    from workers.runtimes.process import ProcessRuntime

    runtime = ProcessRuntime(str(tmp_path / "models"), tmp_path / "instances")
    mark = tmp_path / "got-sigterm"
    shell = f"trap 'touch {mark}; exit 0' TERM; while :; do sleep 0.1; done"
    runtime.create(InstanceRequest("sig", "sig-1", "h", ContainerPlan(
        image="", args=["/bin/sh", "-c", shell], port=1)))  # fmt: skip
    try:
        time.sleep(0.3)
        runtime.terminate("sig-1")
        deadline = time.monotonic() + 5
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mark.exists()  # it had the chance to end in its own way
    finally:
        runtime.remove("sig-1")
    runtime.terminate("sig-1")  # gone: nothing to signal, no error
    assert node_disk_mb(runtime) > 0


def test_an_image_without_a_command_runs_its_own_entrypoint_except_as_a_process():
    from contracts.engines import render
    from contracts.spec_rules import runtime_checks
    from workers.runtimes.base import InstanceRequest
    from workers.runtimes.docker import run_options

    spec = parse_spec(normalise({"name": "web", "containers": [{"image": "img", "port": 8000}]}))
    plan = render(spec)
    assert plan.args == []
    options = run_options(InstanceRequest("web", "web-1", "h", plan), model_dir="/m",
                          bind_address="127.0.0.1")  # fmt: skip
    assert "entrypoint" not in options and "command" not in options  # the image's own
    assert runtime_checks(spec, "docker") == {}
    assert "no image entrypoint" in runtime_checks(spec, "process")["containers[0].command"][0]
