"""Simulated nodes: `python -m benchmarks.fleet_sim.nodes --first 0 --count 100` runs nodes
sim-0000 … sim-0099 in one process, each with its own in-memory runtime.

Each node does what a real worker's node does, through the same functions: it registers and
heartbeats with workers.nodes.node.heartbeat (every WHARF_NODE_HEARTBEAT s) and runs the agent's
converge (every agent interval, or at once when a scheduler wakes it), which starts what is
placed on it with workers.nodes.starter.start_instance, and asks for a pass of each service
whose instances changed state, as a worker's agent does. What is simulated is the host: its cards
(WHARF_SIM_CARDS GPUs, reported instead of nvidia-smi's), and its engines, which are ready
WHARF_SIM_START_DELAY seconds after they were created. As in a real worker, heartbeats and
the agent's passes run on threads of their own (a heartbeat never waits behind a pass that
starts many engines: at 500 nodes, a process's passes took up to 26 s during the burst, and
its nodes were taken for dead). The nodes of one process take turns on the heartbeat thread
(the host settings the heartbeat reads are swapped per node), and AGENTS of them pass at once
on a pool, so a process holds AGENTS + 2 database connections whatever its node count. A node
named in the Redis set DOWN_KEY stops heartbeating and acting, as a host that died: its
runtime's engines are simply left behind.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.db import close_old_connections  # noqa: E402

from workers.fleet import WAKE_KEY, FleetSettings  # noqa: E402
from workers.locks import client  # noqa: E402
from workers.nodes import node as host  # noqa: E402
from workers.nodes import probes  # noqa: E402
from workers.nodes.agent import converge  # noqa: E402
from workers.nodes.devices import Device, DeviceCache  # noqa: E402
from workers.nodes.starter import start_instance  # noqa: E402
from workers.runtimes.memory import MemoryRuntime  # noqa: E402
from workers.tasks import enqueue_reconcile  # noqa: E402

log = logging.getLogger("fleetsim.nodes")
DOWN_KEY = "fleetsim:down"  # the names of nodes whose hosts are dead
LABELS = "resource=sim"  # what the simulated services select
ROUND_REPORT = 30.0  # seconds between reports of the slowest pass (in the process's log)
AGENTS = 4  # nodes of one process whose agents' passes run at once (a database session each)


def node_name(index: int) -> str:
    return f"sim-{index:04d}"


def node_address(index: int) -> str:
    return f"10.{64 + index // 65536}.{index // 256 % 256}.{index % 256}"


class SimRuntime(MemoryRuntime):
    """An in-memory runtime whose engines pass their checks `delay` s after they started."""

    def __init__(self, node: str, address: str, delay: float):
        super().__init__(node=node, address=address)
        self.delay = delay
        self.started: dict[str, float] = {}  # url → when its engine was created

    def create(self, request):
        observed = super().create(request)
        self.started[observed.url] = time.monotonic()
        return observed

    def check(self, url: str, default_path: str, probe, key: str = "") -> bool:
        started = self.started.get(url)
        return started is not None and time.monotonic() - started >= self.delay


class SimNode:
    """One simulated host: its heartbeat and its agent's passes."""

    def __init__(self, index: int, fleet: FleetSettings, delay: float):
        self.name, self.address = node_name(index), node_address(index)
        self.runtime = SimRuntime(self.name, self.address, delay)
        self.fleet = fleet
        self.beat_at = 0.0
        self.probe_clock: dict = {}  # as a real node's agent keeps it (workers.nodes.agent.Agent)

    def heartbeat(self) -> None:
        settings.WHARF_NODE_NAME, settings.WHARF_NODE_ADDRESS = self.name, self.address
        settings.WHARF_NODE_LABELS = LABELS
        host.heartbeat(self.runtime)
        self.beat_at = time.monotonic()

    def converge(self) -> None:
        def start(instance: str) -> None:
            start_instance(instance, self.name, self.runtime, self.fleet)

        touched = converge(self.name, self.runtime, self.fleet, start, check=self.runtime.check,
                           probe_clock=self.probe_clock)  # fmt: skip
        for service in touched:  # as a worker's agent does (workers.celery: on_change)
            enqueue_reconcile(service)


def simulated_cards(count: int) -> DeviceCache:
    cards = [Device("gpu", i, "NVIDIA H200 (simulated)", 143771) for i in range(count)]
    return DeviceCache(lambda: cards, ttl=1e9)


def woken(nodes: list[SimNode]) -> set[str]:
    """The nodes a scheduler woke since the last look (their wake lists emptied)."""
    with client().pipeline() as pipe:
        for node in nodes:
            pipe.lpop(WAKE_KEY.format(node=node.name))
        answers = pipe.execute()
    return {node.name for node, answer in zip(nodes, answers, strict=True) if answer}


def down() -> set[str]:
    return {name if isinstance(name, str) else name.decode()
            for name in client().smembers(DOWN_KEY)}  # fmt: skip


def beat(nodes: list[SimNode], beat_every: float) -> None:
    """Each node's heartbeat when due, forever (a thread of its own, as Heartbeat is)."""
    while True:
        close_old_connections()
        dead = down()
        for node in nodes:
            if node.name not in dead and time.monotonic() - node.beat_at >= beat_every:
                try:
                    node.heartbeat()
                except Exception:  # a node's failure is logged; the others go on
                    log.exception("node %s: heartbeat failed", node.name)
        time.sleep(0.2)


def converge_quietly(node: SimNode) -> float:
    """One node's agent pass, on a thread of the process's pool, a failure logged: how long
    it took (s)."""
    began = time.monotonic()
    try:
        close_old_connections()
        node.converge()
    except Exception:  # a node's failure is logged; the others go on
        log.exception("node %s: pass failed", node.name)
    return time.monotonic() - began


def run(nodes: list[SimNode], interval: float, agents: int = AGENTS) -> None:
    """Passes over every node, forever: a converge when its agent interval has passed or a
    scheduler woke it, up to `agents` nodes at once and each node's one at a time. Every host
    runs its own agent: one node after the other, a round over 100 nodes made each wait for
    the others' database calls and engine starts."""
    last_pass: dict[str, float] = {}
    acting: dict[str, Future] = {}  # node -> its pass in the pool
    kept: set[str] = set()  # woken during their pass: due once it ends
    slowest, told = 0.0, time.monotonic()
    with ThreadPoolExecutor(agents, thread_name_prefix="sim-agent") as pool:
        while True:
            close_old_connections()
            dead, wake = down(), woken(nodes) | kept
            kept = set()
            for name in [name for name, done in acting.items() if done.done()]:
                slowest = max(slowest, acting.pop(name).result())
            for node in nodes:
                if node.name in acting and node.name in wake:
                    # A wake during a pass is kept for the next one, as a real agent's is (its
                    # wake list waits in Redis for its next wait_for_wake).
                    kept.add(node.name)
                if node.name in dead or node.beat_at == 0.0 or node.name in acting:
                    continue  # dead, not registered yet, or still in its last pass
                now = time.monotonic()
                if (
                    node.name in wake
                    or now - last_pass.get(node.name, 0) >= interval
                    or time.time() >= node.probe_clock.get(probes.RECHECK, math.inf)
                ):
                    last_pass[node.name] = now
                    acting[node.name] = pool.submit(converge_quietly, node)
            if time.monotonic() - told >= ROUND_REPORT:  # is the simulator keeping up?
                log.warning("slowest pass of %d nodes: %.2f s (agent interval %g s)",
                            len(nodes), slowest, interval)  # fmt: skip
                slowest, told = 0.0, time.monotonic()
            time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--cards", type=int, default=8)
    parser.add_argument("--delay", type=float, default=1.0, help="engine start, seconds")
    parser.add_argument("--interval", type=float, default=2.0, help="agent passes, seconds")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    host.CARDS = simulated_cards(args.cards)
    fleet = replace(FleetSettings.from_django(), agent_interval=args.interval)
    nodes = [SimNode(i, fleet, args.delay) for i in range(args.first, args.first + args.count)]
    beats = float(settings.WHARF_NODE_HEARTBEAT)
    threading.Thread(target=beat, args=(nodes, beats), name="heartbeats", daemon=True).start()
    run(nodes, args.interval)


if __name__ == "__main__":
    main()
