"""One run at one fleet size: the stack started, every phase in turn, the stack stopped."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import connection

from benchmarks.fleet_sim import figures, phases
from benchmarks.fleet_sim.stack import REPO, Options, Stack
from benchmarks.fleet_sim.watch import Watch


@dataclass(frozen=True)
class Timing:
    """The control plane's clocks for the run (environment variables of the same names)."""

    heartbeat: int = 5  # WHARF_NODE_HEARTBEAT
    grace: int = 15  # WHARF_NODE_GRACE
    evict: int = 15  # WHARF_NODE_EVICT
    reconcile: int = 30  # WHARF_RECONCILE_INTERVAL (its default)
    lease: float = 8.0  # WHARF_BEAT_LEASE_S
    window: float = 20.0  # seconds of steady state measured
    killed: int = 10  # nodes killed at once

    @property
    def evict_within(self) -> float:
        """The issue's target: the eviction grace (silent, then given up) + 5 s."""
        return self.grace + self.evict + 5

    def env(self) -> dict[str, str]:
        return {"WHARF_NODE_HEARTBEAT": str(self.heartbeat), "WHARF_NODE_GRACE": str(self.grace),
                "WHARF_NODE_EVICT": str(self.evict),
                "WHARF_RECONCILE_INTERVAL": str(self.reconcile),
                "WHARF_BEAT_LEASE_S": str(self.lease)}  # fmt: skip


def database_url() -> str:
    """The URL of the database this process uses (the test database under pytest)."""
    db = connection.settings_dict
    return (f"postgresql://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:"
            f"{db['PORT'] or 5432}/{db['NAME']}")  # fmt: skip


def child_env(redis_url: str, home: Path, timing: Timing) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "DATABASE_URL": database_url(),
            "REDIS_URL": redis_url, "WHARF_HOME": str(home), "WHARF_RUNTIME": "process",
            "WHARF_APPROVED_IMAGES": phases.IMAGE,
            "WHARF_SECRET_KEY": settings.SECRET_KEY, "WHARF_TOKEN_KEY": settings.WHARF_TOKEN_KEY,
            **timing.env()}  # fmt: skip


def run_size(options: Options, timing: Timing, redis_url: str, home: Path) -> figures.SizeFigures:
    """Every phase at `options.nodes` nodes; the processes' logs stay under `home`/logs."""
    (home / "logs").mkdir(parents=True, exist_ok=True)
    stack = Stack(options, child_env(redis_url, home, timing), home / "logs")
    services = options.nodes  # ten instances each: ten per node
    found = figures.SizeFigures(options.nodes, services * phases.INSTANCES_PER_SERVICE)
    watch: Watch | None = None
    try:
        stack.start_control_plane()
        watch = Watch(redis_url, stack.gateway_url)
        watch.start()
        stack.start_nodes()
        phases.nodes_registered(options.nodes, 60 + options.nodes * 0.5)
        token = phases.api_token()
        burst, found.routed = phases.burst(stack, watch, token, services, options.start_delay,
                                           120 + services * 2.0)  # fmt: skip
        found.values |= burst
        if found.routed < found.instances:
            found.notes.append(f"only {found.routed} of {found.instances} instances routed "
                               f"within {120 + services * 2.0:g} s of the burst; the placed "
                               "and routed figures are of those")  # fmt: skip
        time.sleep(timing.heartbeat + 2)  # the last writes of the burst settle
        found.values |= phases.steady_state(stack, watch, redis_url, options.nodes, timing.window)
        found.values |= phases.lists(stack, token)
        found.values |= phases.publishes(watch, redis_url)
        killed = min(timing.killed, max(1, options.nodes // 5))
        took, found.killed, found.moved = phases.kill_nodes(stack, redis_url, killed,
                                                            timing.evict_within + 120)  # fmt: skip
        found.values["evicted_s"] = took
        found.notes.append(f"{killed} nodes killed held {found.moved} instances")
    finally:
        if watch is not None:
            watch.stop()
        stack.stop()
    return found
