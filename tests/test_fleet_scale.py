"""The fleet simulator (benchmarks/fleet_scale.py) at a small size, on PostgreSQL: 20 simulated
nodes register and heartbeat through the workers' code, a real API, worker (with its beat) and
gateway run as processes, 20 services (200 instances) are created at once, and 4 nodes are then
killed. Asserted: convergence (every instance placed and routed by the gateway, the killed
nodes' instances placed elsewhere), not timings; the figures' arithmetic, table-driven."""

from __future__ import annotations

import math

import pytest
import redis
from django.db import connection

from benchmarks.fleet_sim import figures
from benchmarks.fleet_sim.run import Timing, run_size
from benchmarks.fleet_sim.stack import Options
from controlplane.nodes.models import Node
from controlplane.services.models import Instance, Service


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="processes share the database")
@pytest.mark.timeout(180)
def test_a_small_fleet_places_and_routes_every_instance_and_replaces_killed_nodes(
    redis_url, tmp_path
):
    redis.Redis.from_url(redis_url).flushdb()
    options = Options(nodes=20, start_delay=0.5, agent_interval=1.0, node_processes=1)
    timing = Timing(heartbeat=1, grace=2, evict=2, reconcile=3, lease=2.0, window=2.0, killed=4)

    found = run_size(options, timing, redis_url, tmp_path)

    assert found.instances == 200
    assert found.routed == 200  # the gateway served a snapshot routing each one
    assert len(found.killed) == 4 and found.moved > 0
    assert Node.objects.filter(name__startswith="sim-").count() == 20
    rows = Instance.objects.exclude(node="")
    assert not rows.filter(node__in=found.killed).exists()
    for service in Service.objects.all():
        assert rows.filter(service=service).count() == 10, service.name
    assert not math.isnan(found.values["evicted_s"])
    assert found.values["sim_cores"] > 0  # the simulated nodes' share of the machine, measured
    # The burst's share of the machine and who had it, measured (not a default or a NaN).
    assert found.values["burst_s"] > 0 and 0 < found.values["burst_busy_pct"] <= 100
    assert found.values["burst_cp_cores"] > 0 and found.values["burst_sim_cores"] > 0
    assert found.values["burst_pg_cores"] > 0  # the test's PostgreSQL served the burst


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([], 50, math.nan), ([3.0], 99, 3.0), ([1, 2, 3, 4], 50, 2), ([1, 2, 3, 4], 99, 4),
     (list(range(1, 101)), 99, 99)],
)  # fmt: skip
def test_percentile_is_nearest_rank(values, q, expected):
    found = figures.percentile(values, q)
    assert (math.isnan(found) and math.isnan(expected)) or found == expected


@pytest.mark.parametrize(
    ("loaded", "first", "expected"),
    [
        ({10: 1.0, 20: 2.0}, {"a": 10, "b": 15, "c": 20}, {"a": 1.0, "b": 2.0, "c": 2.0}),
        ({10: 1.0}, {"a": 11}, {}),  # not served yet: not routed
        ({10: 5.0, 20: 3.0}, {"a": 5}, {"a": 3.0}),  # the earliest of any later version
    ],
)
def test_an_instance_is_routed_when_the_gateway_serves_a_version_that_routes_it(
    loaded, first, expected
):
    assert figures.first_at_or_after(loaded, first) == expected


def test_latencies_run_from_the_service_create_less_the_simulated_start():
    created = {"s": 10.0}
    events = {"s-1": 11.5, "s-2": 13.0, "other-1": 12.0}
    service_of = {"s-1": "s", "s-2": "s", "other-1": "other"}
    assert sorted(figures.since_create(created, events, service_of, minus=0.5)) == [1.0, 2.5]


def test_a_figure_is_marked_against_its_target():
    target = figures.Target("x", "x", 250)
    assert figures.cell(target, 100.0) == "100 ok"
    assert figures.cell(target, 300.0) == "300 MISS"
    assert figures.cell(figures.Target("y", "y", None), 3.0) == "3"
    assert figures.cell(target, math.nan) == "-"
