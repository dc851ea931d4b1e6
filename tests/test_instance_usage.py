"""The autoscaler's `cpu` and `gpu` strategies: what an instance uses, from its runtime (a real
process group, a real container), sampled by the node into Redis, averaged per role and turned
into a count; the pure arithmetic in tables."""

from __future__ import annotations

import json
import time
from pathlib import Path

import docker
import pytest

from contracts import instance_usage
from contracts.engines.plan import ContainerPlan
from contracts.spec import SpecError, parse_spec
from controlplane.services.models import Service
from tests.test_autoscaling import events, fleet, gateway, report  # noqa: F401 (fixtures)
from tests.test_fleet import custom, deploy
from workers.runtimes.base import InstanceRequest
from workers.runtimes.docker import DockerRuntime
from workers.runtimes.process import ProcessRuntime
from workers.scaling.autoscaler import Signals, State, decide
from workers.scaling.autoscaling import autoscale_all
from workers.scaling.usage_sampler import UsageSampler, parse_utilisation

BUSY = "while :; do :; done"


def test_samples_are_kept_apart_from_the_keys_usage_by_minute() -> None:
    # The usage flush reads every wharf:usage:* key as a minute of the keys' usage; an
    # instance's sample there would be warned about at every flush.
    from contracts.usage import USAGE_PREFIX

    assert not instance_usage.key("chat-0a1b2c").startswith(USAGE_PREFIX)


@pytest.mark.parametrize(
    ("before", "now", "cores"),
    [
        (None, (10.0, 5.0), None),  # a first reading: nothing to compare with
        ((10.0, 5.0), (12.0, 8.0), 1.5),  # 3 CPU seconds in 2 s
        ((10.0, 5.0), (12.0, 5.0), 0.0),
        ((10.0, 5.0), (12.0, 1.0), None),  # the counter went back: it restarted
        ((10.0, 5.0), (10.0, 6.0), None),  # no time passed
    ],
)
def test_cores_in_use_come_from_two_readings(before, now, cores):
    assert instance_usage.cores_used(before, now) == cores


@pytest.mark.parametrize(
    ("cards", "utilisation", "mean"),
    [
        ((0, 1), {0: 50.0, 1: 70.0, 2: 0.0}, 60.0),
        ((2,), {0: 50.0, 2: 10.0}, 10.0),
        ((0, 3), {0: 50.0}, None),  # a card without a figure: no figure
        ((), {0: 50.0}, None),
    ],
)
def test_card_utilisation_is_the_mean_of_its_own_cards(cards, utilisation, mean):
    assert instance_usage.mean_utilisation(cards, utilisation) == mean


@pytest.mark.parametrize(("cores", "requested", "percent"),
                         [(1.5, 2.0, 75.0), (0.5, None, 50.0), (3.0, 1.0, 300.0)])  # fmt: skip
def test_cpu_is_a_percentage_of_what_the_instance_asked_for(cores, requested, percent):
    assert instance_usage.cpu_percent(cores, requested) == percent


def test_nvidia_smis_utilisation_lines_are_read_and_na_left_out():
    text = "0, 73\n1, [N/A]\n2, 5\nbad line\n"
    assert parse_utilisation(text) == {0: 73.0, 2: 5.0}


@pytest.mark.parametrize(
    ("metric", "signals", "count"),
    [
        ("cpu", Signals(ready=2, cpu=160.0), 4),  # 160% against 80 on 2 → 4
        ("cpu", Signals(ready=2, cpu=20.0), 1),
        ("gpu", Signals(ready=1, gpu=95.0), 2),
        ("gpu[util]", Signals(ready=1, gpu=95.0), 2),
        ("cpu", Signals(ready=2), 2),  # no figure: no change
    ],
)
def test_cpu_and_gpu_strategies_follow_the_mean_percentage(metric, signals, count):
    threshold = 80 if metric == "cpu" else 50
    spec = parse_spec({"name": "s", "containers": [{"image": "i", "command": "c", "port": 1}],
                       "autoscaler": {"min": 1, "max": 8, "scaleStrategies": [
                           {"metricName": metric, "threshold": threshold}]}})  # fmt: skip
    assert spec.autoscaler is not None
    decision = decide(spec.autoscaler, State(2, last_traffic=0.0), signals, now=0.0)
    assert decision.replicas == count
    if count != 2:
        assert "%" in decision.reason


@pytest.mark.parametrize(
    ("strategies", "words"),
    [
        ([{"metricName": "gpu", "threshold": 50}, {"metricName": "gpu[util]", "threshold": 60}],
         "once"),
        ([{"metricName": "gpu", "threshold": 150}], "at most 100"),
        ([{"metricName": "memory", "threshold": 50}], "metricName"),
    ],
)  # fmt: skip
def test_a_bad_usage_strategy_is_refused(strategies, words):
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "s", "containers": [{"image": "i", "command": "c", "port": 1}],
                    "autoscaler": {"min": 1, "max": 2, "scaleStrategies": strategies}})  # fmt: skip
    assert words in json.dumps(caught.value.errors)


def test_a_process_groups_cpu_seconds_grow_while_it_computes(tmp_path: Path):
    runtime = ProcessRuntime(str(tmp_path / "models"), tmp_path / "instances")
    plan = ContainerPlan(image="", args=["/bin/sh", "-c", f"({BUSY}) & sleep 300"], port=1)
    idle = ContainerPlan(image="", args=["/bin/sh", "-c", "sleep 300"], port=1)
    try:
        runtime.create(InstanceRequest("usage", "usage-busy", "h", plan))
        runtime.create(InstanceRequest("usage", "usage-idle", "h", idle))
        first = runtime.cpu_seconds("usage-busy")
        time.sleep(1.0)
        busy, still = runtime.cpu_seconds("usage-busy"), runtime.cpu_seconds("usage-idle")
        assert first is not None and busy is not None and busy - first > 0.3  # a child's loop
        assert still is not None and still < 0.2
    finally:
        for name in ("usage-busy", "usage-idle"):
            runtime.remove(name)
    assert runtime.cpu_seconds("usage-busy") is None  # gone: no figure


def test_a_containers_cpu_seconds_come_from_its_cgroup():
    client = docker.from_env()
    name = "wharf-test-usage-busy"
    image = next(tag for i in client.images.list("wharf/wharf") for tag in i.tags)
    container = client.containers.run(image, ["/bin/sh", "-c", BUSY], name=name, detach=True,
                                      entrypoint=[], network_mode="none")  # fmt: skip
    try:
        runtime = DockerRuntime("/nonexistent")
        first = runtime.cpu_seconds(name)
        time.sleep(1.0)
        later = runtime.cpu_seconds(name)
        assert first is not None and later is not None and later - first > 0.3
    finally:
        container.remove(force=True)
    assert DockerRuntime("/nonexistent").cpu_seconds(name) is None


@pytest.mark.django_db
def test_the_nodes_samples_turn_into_a_cpu_scale_up(fleet, gateway):  # noqa: F811
    autoscaler = {
        "min": 1,
        "max": 4,
        "scaleStrategies": [
            {"metricName": "cpu", "threshold": 50},
            {"metricName": "gpu", "threshold": 90},
        ],
    }
    deploy(custom("crunch", autoscaler=autoscaler))
    fleet.settle()
    (row,) = fleet.rows("crunch")
    row.devices = "gpu:0"  # as if it held a card (this machine has none)
    row.save(update_fields=["devices"])
    used = iter([10.0, 11.5])  # CPU seconds: 1.5 s over the ~1 s between two passes
    sampler = UsageSampler("a", lambda name: next(used), utilisation=lambda: {0: 30.0})
    sampler.store = gateway
    assert sampler.sample_once() == 1  # the card's figure; no CPU rate from one reading yet
    time.sleep(1.0)
    assert sampler.sample_once() == 1
    sample = instance_usage.decode(gateway.get(instance_usage.key(row.name)))
    assert sample is not None and sample["gpu_util"] == 30.0
    assert 1.2 < sample["cpu_cores"] < 1.6  # ~150% of one core
    report(gateway, qps={})
    assert autoscale_all(gateway) == {"crunch"}
    assert Service.objects.get(name="crunch").autoscale[""]["replicas"] == 3
    assert "cpu 1" in events("crunch")[0][1] and "% against 50" in events("crunch")[0][1]
