"""A scheduling pass at fleet size, in process (issue 31: "passes that read only what they need"),
without simulated agents: N nodes of 8 cards and N services of ten instances (every other one
a card each) are written into a fresh database, and the scheduler as shipped places them, one
pass per service, as a burst of creates would:

    .venv/bin/python benchmarks/placing_pass.py [--nodes 100,500]

Printed per size, medians in ms: the first passes (an empty fleet), the last twenty (the fleet
nearly full) and a settled pass (nothing to place), three ways in the same run:
- nothing kept: the nodes' rows without an inventory digest (every row read and decoded every
  pass) and the worker's kept capacity forgotten before each pass (every instance's row read
  and held on its node every pass): what a pass did before either was kept;
- offers kept: rows written by heartbeats (a digest: each worker keeps the offers it built,
  workers.scheduling.offers), capacity still forgotten before each pass;
- both kept: as shipped (workers.scheduling.capacity brings the kept states up to date).
The nodes' heartbeats are kept fresh between passes. DATABASE_URL (default the PostgreSQL
database `wharf_fleetsim`) is migrated and flushed; Redis is a redis-server of the run's own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DATABASE_URL", "postgresql://wharf:wharf@127.0.0.1:5432/wharf_fleetsim")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.utils import timezone  # noqa: E402

from benchmarks.fleet_sim.stack import private_redis  # noqa: E402
from controlplane.nodes.models import Node  # noqa: E402
from controlplane.services.models import Instance, Service  # noqa: E402
from controlplane.workspaces.models import DEFAULT, Workspace  # noqa: E402
from workers.fleet import FleetSettings  # noqa: E402
from workers.scheduling import capacity, offers  # noqa: E402
from workers.scheduling.scheduler import schedule  # noqa: E402

LAST = 20  # passes timed at the fleet's end, and settled passes


def spec(index: int) -> dict:
    metadata: dict = {"instance": 10, "cpu": 0.1, "memory": 256}
    if index % 2 == 0:
        metadata["gpu"] = 1
    container = {"image": "fleetsim/engine:1", "command": "serve", "port": 8000}
    return {"name": f"svc_{index:04d}", "metadata": metadata, "containers": [container]}


def fresh_fleet(nodes: int, digests: bool) -> list[str]:
    """`nodes` nodes (with or without an inventory digest) and as many services, unplaced."""
    Instance.objects.all().delete()
    Service.objects.all().delete()
    Node.objects.all().delete()
    offers._kept.clear()
    capacity.forget()
    cards = [{"kind": "gpu", "index": k, "name": "H200", "memory_mb": 143771} for k in range(8)]
    Node.objects.bulk_create(
        Node(name=f"n{i:04d}", address=f"10.1.{i // 250}.{i % 250}", cards=cards, cpus=64,
             memory_mb=512000, disk_mb=10**6, runtime="process", heartbeat_at=timezone.now(),
             inventory_digest=f"{i:016x}" if digests else "")
        for i in range(nodes)
    )  # fmt: skip
    workspace = Workspace.objects.get_or_create(name=DEFAULT)[0]
    rows = Service.objects.bulk_create(
        Service(name=f"svc_{i:04d}", workspace=workspace, spec=spec(i)) for i in range(nodes)
    )
    return [row.name for row in rows]


def passes(names: list[str], fleet: FleetSettings, keep: bool) -> list[float]:
    took = []
    for number, name in enumerate(names):
        if number % 10 == 0:  # the heartbeats, outside the timing
            Node.objects.update(heartbeat_at=timezone.now())
        if not keep:
            capacity.forget()
        began = time.perf_counter()
        schedule(name, fleet)
        took.append(time.perf_counter() - began)
    return took


def measure(nodes: int, digests: bool, keep: bool) -> dict[str, float]:
    names = fresh_fleet(nodes, digests)
    fleet = FleetSettings.from_django()
    placing = passes(names, fleet, keep)
    settled = passes(names[:LAST], fleet, keep)
    return {
        "first 20 placing passes": statistics.median(placing[:LAST]) * 1000,
        "last 20 placing passes": statistics.median(placing[-LAST:]) * 1000,
        "a settled pass": statistics.median(settled) * 1000,
        "instances": Instance.objects.count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="100,500", help="sizes, comma-separated")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    home = Path(tempfile.mkdtemp(prefix="placing-pass-"))
    server, url = private_redis(home)
    try:
        with override_settings(REDIS_URL=url):
            for nodes in (int(size) for size in args.nodes.split(",")):
                ways = {
                    "nothing kept": measure(nodes, digests=False, keep=False),
                    "offers kept": measure(nodes, digests=True, keep=False),
                    "both kept": measure(nodes, digests=True, keep=True),
                }
                placed = ways["both kept"]["instances"]
                print(f"\n{nodes} nodes, {placed:.0f} instances placed; medians, ms")
                print(f"{'pass':26} | " + " | ".join(f"{way:>12}" for way in ways))
                for figure in ("first 20 placing passes", "last 20 placing passes",
                               "a settled pass"):  # fmt: skip
                    print(
                        f"{figure:26} | " + " | ".join(f"{ways[way][figure]:12.1f}" for way in ways)
                    )
    finally:
        server.terminate()
        server.wait(10)
        call_command("flush", interactive=False, verbosity=0)


if __name__ == "__main__":
    main()
