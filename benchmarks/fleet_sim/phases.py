"""The phases of one run at one fleet size, in order: the nodes register; a burst of service
creates through the API until every instance is routed; a quiet window (steady state); paged
list calls; forced snapshot publishes, and one service's entry published alone; 10 nodes
killed at once until their instances are placed elsewhere. Each phase returns its figures;
benchmarks/fleet_scale.py prints them."""

from __future__ import annotations

import contextlib
import io
import json
import math
import queue
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import redis
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from benchmarks.fleet_sim import figures
from benchmarks.fleet_sim.nodes import DOWN_KEY
from benchmarks.fleet_sim.stack import Stack, database_cpu_seconds, machine_ticks, wait_for
from benchmarks.fleet_sim.watch import Watch
from contracts.routing import SNAPSHOT_KEY
from controlplane.nodes.models import Node
from controlplane.services.models import Instance
from controlplane.services.routing import publish_for, publish_snapshot
from controlplane.workspaces.models import DEFAULT, Workspace

INSTANCES_PER_SERVICE = 10
IMAGE = "fleetsim/engine:1"  # approved for the run (WHARF_APPROVED_IMAGES)
CREATORS = 8  # clients sending the burst at once


def service_spec(index: int) -> dict:
    """Ten instances; every other service's take one card each (half the fleet's cards), the
    others only CPU and memory. `resource` keeps them on the simulated nodes."""
    metadata: dict = {"instance": INSTANCES_PER_SERVICE, "cpu": 0.1, "memory": 256,
                      "resource": "sim"}  # fmt: skip
    if index % 2 == 0:
        metadata["gpu"] = 1
    return {
        "name": f"fleet_{index:04d}",
        "containers": [{"image": IMAGE, "command": "serve", "port": 8000}],
        "metadata": metadata,
    }


def api_token() -> str:
    """An operator's token in the default workspace, which is granted what the simulated
    services ask for: their command (on the process runtime the API checks against) and the
    simulated nodes' resource group."""
    out = io.StringIO()
    call_command("create_api_token", "fleetsim", stdout=out)
    Workspace.objects.filter(name=DEFAULT).update(
        grants={"process_code": True, "resource_groups": ["sim"]}
    )
    return out.getvalue().strip()


def nodes_registered(count: int, seconds: float) -> None:
    wait_for(lambda: Node.objects.filter(name__startswith="sim-").count() >= count, seconds,
             f"{count} nodes registered", every=0.5)  # fmt: skip


def burst(stack: Stack, watch: Watch, token: str, services: int, delay: float,
          seconds: float) -> tuple[dict[str, float], int]:  # fmt: skip
    """Every service created at once (CREATORS at a time), until every instance is routed
    or `seconds` have passed; the figures and how many instances were routed."""
    created: dict[str, float] = {}
    latencies: list[float] = []
    # Each creator's client is made before the burst: a client made per call (httpx.post)
    # builds an SSL context, about 30 to 50 ms of this process's CPU with the GIL held, and
    # that was timed as the API's answer (create p99 1.25 to 1.75 s at 50 nodes before).
    clients: queue.SimpleQueue[httpx.Client] = queue.SimpleQueue()
    for _ in range(CREATORS):
        clients.put(httpx.Client(base_url=stack.api_url, headers={"Authorization": token},
                                 timeout=60, trust_env=False))  # fmt: skip

    def create(index: int) -> None:
        spec, client = service_spec(index), clients.get()
        try:
            sent = time.monotonic()
            answer = client.post("/api/v1/services", json=spec)
            done = time.monotonic()
        finally:
            clients.put(client)
        if answer.status_code != 201:
            raise RuntimeError(f"create {spec['name']}: {answer.status_code} {answer.text[:300]}")
        latencies.append(done - sent)
        created[spec["name"]] = done

    # What the burst took of the machine, from the first create until every instance is
    # routed: whether its latencies waited for a core.
    before = _usage(stack)
    try:
        with ThreadPoolExecutor(CREATORS) as pool:
            list(pool.map(create, range(services)))
    finally:
        while not clients.empty():
            clients.get().close()
    total = services * INSTANCES_PER_SERVICE

    def all_routed() -> bool:
        stack.check_alive()
        return len(watch.routed()) >= total

    with contextlib.suppress(TimeoutError):  # the figures of those routed; the caller
        wait_for(all_routed, seconds, f"all {total} instances routed", every=0.5)  # says so
    after = _usage(stack)
    took = after[0] - before[0]
    busy, ticks, control, database, simulated = (
        a - b for a, b in zip(after[1:], before[1:], strict=True)
    )
    service_of = {name: service for name, service, _ in watch.rows}
    routed_at = watch.routed()
    for name in routed_at:  # placed and routed after the last look at the rows
        service_of.setdefault(name, name.rsplit("-", 1)[0])
    placed = figures.since_create(created, watch.placed_at(), service_of)
    routed = figures.since_create(created, routed_at, service_of, delay)
    ready_since = {
        name: at.timestamp()
        for name, at in Instance.objects.filter(
            name__in=list(routed_at), ready_since__isnull=False
        ).values_list("name", "ready_since")
    }
    after_ready = figures.after_ready(routed_at, ready_since, time.time() - time.monotonic())
    return {
        "create_p99_ms": figures.percentile(latencies, 99) * 1000,
        "placed_p50_s": figures.percentile(placed, 50),
        "placed_p99_s": figures.percentile(placed, 99),
        "routed_p50_s": figures.percentile(routed, 50),
        "routed_p99_s": figures.percentile(routed, 99),
        "ready_routed_p50_s": figures.percentile(after_ready, 50),
        "ready_routed_p99_s": figures.percentile(after_ready, 99),
        "burst_busy_pct": 100 * busy / max(1, ticks),
        "burst_s": took,
        "burst_cp_cores": control / took,
        "burst_pg_cores": database / took,
        "burst_sim_cores": simulated / took,
    }, len(routed)


def _usage(stack: Stack) -> tuple[float, int, int, float, float, float]:
    """CPU used so far: (now, the machine's busy and total ticks, the API's and workers'
    seconds, PostgreSQL's, the simulated nodes' and the gateway's)."""
    busy, ticks = machine_ticks()
    return (time.monotonic(), busy, ticks, stack.cpu(), database_cpu_seconds(),
            stack.cpu(("nodes", "gateway")))  # fmt: skip


def xact_commits() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        return int(cursor.fetchone()[0])


def row_writes() -> int:
    """Rows inserted, updated and deleted in the database so far (PostgreSQL's statistics)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables"
        )
        return int(cursor.fetchone()[0])


def steady_state(stack: Stack, watch: Watch, redis_url: str, nodes: int,
                 window: float) -> dict[str, float]:  # fmt: skip
    """Nothing changes for `window` s: the control plane's CPU (API and workers, with their
    beat), PostgreSQL commits, rows written and Redis commands, each per second per 100
    nodes, and the cores the simulator and the gateway take. The database and Redis figures
    include the simulated nodes' heartbeats and agent passes (real nodes make them too); the
    watch is paused meanwhile, so they do not include the benchmark's."""
    client = redis.Redis.from_url(redis_url)
    watch.paused.set()
    time.sleep(1)  # a look under way ends
    cpu0, pg0, writes0 = stack.cpu(), xact_commits(), row_writes()
    sim0 = stack.cpu(("nodes", "gateway"))
    redis0, t0 = int(client.info("stats")["total_commands_processed"]), time.monotonic()
    time.sleep(window)
    time.sleep(1)  # PostgreSQL's statistics reach the view within a second
    cpu1, pg1, writes1 = stack.cpu(), xact_commits(), row_writes()
    sim1 = stack.cpu(("nodes", "gateway"))
    redis1, t1 = int(client.info("stats")["total_commands_processed"]), time.monotonic()
    watch.paused.clear()
    per_100 = 100 / nodes / (t1 - t0)
    return {
        "cpu_per_100": (cpu1 - cpu0) * per_100,
        "pg_per_100": (pg1 - pg0 - 4) * per_100,  # less the four reads of the figures
        "writes_per_100": (writes1 - writes0) * per_100,
        "redis_per_100": (redis1 - redis0 - 2) * per_100,
        # What the simulated nodes and the gateway take of the machine meanwhile, in cores:
        # the latencies measured after the burst share the machine with it.
        "sim_cores": (sim1 - sim0) / (t1 - t0),
    }


def lists(stack: Stack, token: str, calls: int = 40, limit: int = 100) -> dict[str, float]:
    """`GET /api/v1/services` and `/nodes`, a page of `limit` at a time, following `next`."""
    out = {}
    with httpx.Client(headers={"Authorization": token}, timeout=30, trust_env=False) as http:
        for kind in ("services", "nodes"):
            url, took = f"{stack.api_url}/api/v1/{kind}?limit={limit}", []
            for _ in range(calls):
                sent = time.monotonic()
                answer = http.get(url)
                took.append(time.monotonic() - sent)
                answer.raise_for_status()
                nxt = answer.links.get("next", {}).get("url")
                url = nxt or f"{stack.api_url}/api/v1/{kind}?limit={limit}"
            out[f"{kind}_p99_ms"] = figures.percentile(took, 99) * 1000
    return out


def publishes(watch: Watch, redis_url: str, times: int = 5) -> dict[str, float]:
    """The routing snapshot built and written by the control plane's own function (forced, as
    a drain forces it), and how long the gateway takes to serve it after it is written."""
    client = redis.Redis.from_url(redis_url)
    took, reloads = [], []
    for _ in range(times):
        sent = time.monotonic()
        with override_settings(REDIS_URL=redis_url):  # the run's Redis, not this process's
            publish_snapshot(force=True)
        written = time.monotonic()
        took.append(written - sent)
        version, _ = json_version(client.get(SNAPSHOT_KEY))
        loaded = watch.gateway_loaded(version, 30)
        if loaded is not None:
            reloads.append(loaded - written)
        time.sleep(0.5)
    entry = entry_publishes(redis_url, times)
    return {"publish_ms": figures.percentile(took, 50) * 1000,
            "reload_ms": figures.percentile(reloads, 50) * 1000,
            "entry_ms": figures.percentile(entry, 50) * 1000}  # fmt: skip


def entry_publishes(redis_url: str, times: int) -> list[float]:
    """A scheduling pass's publish after one instance left routing, then came back (the
    service's entry alone is replaced: routing.publish_for), seconds each."""
    took = []
    row = Instance.objects.filter(state="ready").select_related("service").first()
    if row is None:
        return [math.nan]
    for state in ("unknown", "ready") * times:
        Instance.objects.filter(pk=row.pk).update(state=state)
        sent = time.monotonic()
        with override_settings(REDIS_URL=redis_url):
            publish_for(row.service.name)
        took.append(time.monotonic() - sent)
    return took


def json_version(text: bytes | str | None) -> tuple[int, int]:
    """A snapshot's version and its number of services."""
    data = json.loads(text or b"{}")
    return int(data.get("version", 0)), len(data.get("services", {}))


def kill_nodes(
    stack: Stack, redis_url: str, count: int, seconds: float
) -> tuple[float, list[str], int]:
    """`count` nodes that hold instances stop at once; seconds until every instance of the
    services they held is placed on a live node again, the nodes, how many instances they
    held."""
    rows = list(Instance.objects.exclude(node="").values_list("node", "service__name"))
    by_node: dict[str, set[str]] = {}
    for node, service in rows:
        by_node.setdefault(node, set()).add(service)
    killed = sorted(by_node)[:count]
    held = sum(1 for node, _ in rows if node in killed)
    services = set().union(*(by_node[n] for n in killed)) if killed else set()
    redis.Redis.from_url(redis_url).sadd(DOWN_KEY, *killed)
    started = time.monotonic()

    def moved() -> bool:
        stack.check_alive()
        live = Instance.objects.filter(service__name__in=services).exclude(node="")
        if live.filter(node__in=killed).exists():
            return False
        placed = Counter(live.values_list("service__name", flat=True))
        return all(placed[s] >= INSTANCES_PER_SERVICE for s in services)

    wait_for(moved, seconds, f"the instances of {count} killed nodes placed elsewhere", every=0.25)
    return time.monotonic() - started, killed, held
