"""The control plane at fleet scale (issue 31): N simulated nodes (default 500, 8 cards each)
drive the real API, workers (scheduler, placement, rollout, autoscaler, beat), PostgreSQL,
Redis and a gateway, and every figure is printed beside its target, one line per size:

    .venv/bin/python benchmarks/fleet_scale.py [--nodes 500 | --sizes 50,100,200,500]
        [--start-delay 1] [--window 20] [--api-processes 2] [--redis URL]

Each size runs on a fresh database (DATABASE_URL, default the PostgreSQL database
`wharf_fleetsim`, migrated and flushed) and a Redis server of its own (redis-server on a free
port, so that its command count is the fleet's alone; --redis URL uses that database instead,
flushed): the nodes register, one
service per node is created at once through the API (ten instances each, so ten per node; every
other service's instances take a card each), the fleet is left alone for a window, the paged
lists are read, the snapshot is published, and 10 nodes are killed. benchmarks/fleet_sim has
the pieces; benchmarks/README.md ("Fleet at scale") the figures.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DATABASE_URL", "postgresql://wharf:wharf@127.0.0.1:5432/wharf_fleetsim")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django  # noqa: E402

django.setup()

import redis  # noqa: E402
from django.core.management import call_command  # noqa: E402

from benchmarks.fleet_sim.figures import table  # noqa: E402
from benchmarks.fleet_sim.run import Timing, run_size  # noqa: E402
from benchmarks.fleet_sim.stack import Options, private_redis  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--sizes", help="comma-separated node counts, one line each")
    parser.add_argument("--cards", type=int, default=8)
    parser.add_argument("--start-delay", type=float, default=1.0, help="engine start, s")
    parser.add_argument("--window", type=float, default=20.0, help="steady state, s")
    parser.add_argument("--node-processes", type=int, default=0, help="0: one per 100 nodes")
    parser.add_argument("--workers", type=int, default=1, help="control-plane workers")
    parser.add_argument("--api-processes", type=int, default=2, help="uvicorn's --workers")
    parser.add_argument("--redis", help="a Redis database to use (flushed): default, its own")
    args = parser.parse_args()
    # Stopped (timeout, Ctrl-C): the processes it started are stopped too (run_size's finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else [args.nodes]
    timing = Timing(window=args.window)
    call_command("migrate", verbosity=0)
    lines = []
    for size in sizes:
        call_command("flush", interactive=False, verbosity=0)
        home = Path(tempfile.mkdtemp(prefix=f"fleetsim-{size}-"))
        server, url = private_redis(home) if args.redis is None else (None, args.redis)
        redis.Redis.from_url(url).flushdb()
        options = Options(nodes=size, cards=args.cards, start_delay=args.start_delay,
                          node_processes=args.node_processes, workers=args.workers,
                          api_processes=args.api_processes)  # fmt: skip
        print(f"{size} nodes: running (logs under {home}/logs)", flush=True)
        try:
            lines.append(run_size(options, timing, url, home))
        finally:
            if server is not None:
                server.terminate()
                server.wait(10)
        print(table(lines, timing.evict_within), flush=True)
    print(f"\nkilled nodes' instances measured from the kill; target = WHARF_NODE_GRACE "
          f"{timing.grace} + WHARF_NODE_EVICT {timing.evict} + 5 s; sim+gw cores: what the "
          f"simulated nodes and the gateway took of this machine's {os.cpu_count()} in the "
          f"quiet window")  # fmt: skip


if __name__ == "__main__":
    main()
