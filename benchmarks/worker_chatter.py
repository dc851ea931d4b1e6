"""Celery's talk between workers, beside the worker Wharf starts: what N idle node workers cost
Redis and the CPU, as N grows.

Every host of a fleet runs a worker. Celery's defaults have each one publish a heartbeat event
every 2 s and, through gossip, receive every other worker's: Redis delivers N² events each
period. Wharf starts its workers without mingle, gossip and heartbeat events
(controlplane/nodes/management/commands/worker.py, ALONE); a node's heartbeat is its Node row.
For each size this starts N real node workers (`celery_worker_argv`, as `manage.py worker`
starts them: the process runtime, Celery with its beat) on a Redis server of the run's own and
the PostgreSQL database DATABASE_URL (default `wharf_fleetsim`, migrated and flushed), once as
Wharf starts them and once with Celery's defaults, and prints over a window once they are idle:

- Redis commands a second, PUBLISHes a second and bytes sent to its clients a second;
- Redis's connected clients;
- the workers' CPU together, in % of one core.

    .venv/bin/python benchmarks/worker_chatter.py                   # 10 and 20 workers, ~5 min
    .venv/bin/python benchmarks/worker_chatter.py --sizes 5 --window 10
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
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

import redis  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from benchmarks.fleet_sim.stack import cpu_seconds, private_redis, stop_all, wait_for  # noqa: E402
from controlplane.nodes.management.commands.worker import ALONE, celery_worker_argv  # noqa: E402

LAYOUTS = ("wharf", "celery defaults")


def start_workers(count: int, layout: str, url: str, home: Path) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "REDIS_URL": url, "WHARF_HOME": str(home),
           "WHARF_RUNTIME": "process", "WHARF_SECRET_KEY": settings.SECRET_KEY,
           "WHARF_TOKEN_KEY": settings.WHARF_TOKEN_KEY}  # fmt: skip
    workers = []
    for i in range(count):
        argv = celery_worker_argv(home / f"celerybeat-schedule-{i}", 4, "INFO", False,
                                  hostname=f"chatter-{i}@%h")  # fmt: skip
        if layout != "wharf":
            argv = [arg for arg in argv if arg not in ALONE]
        node = {"WHARF_NODE_NAME": f"chatter-{i}", "WHARF_NODE_ADDRESS": "127.0.0.1"}
        with open(home / f"worker-{i}.log", "wb") as log:
            workers.append(subprocess.Popen(argv, cwd=REPO, env={**env, **node}, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True))  # fmt: skip
    return workers


def counters(client: redis.Redis) -> tuple[int, int, int, int]:
    info = client.info("all")
    publishes = info.get("cmdstat_publish", {}).get("calls", 0)
    return (info["total_commands_processed"], publishes, info["total_net_output_bytes"],
            info["connected_clients"])  # fmt: skip


def measure(count: int, layout: str, window: float, settle: float) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix=f"chatter-{count}-"))
    server, url = private_redis(home)
    workers = start_workers(count, layout, url, home)
    try:
        started = time.monotonic()
        for i in range(count):
            wait_for(lambda i=i: b" ready." in (home / f"worker-{i}.log").read_bytes(),
                     60 + 5 * count, f"worker {i} ready (see {home})")  # fmt: skip
        ready_after = time.monotonic() - started
        time.sleep(settle)  # the first passes and registrations settle
        pids = [w.pid for w in workers]
        with redis.Redis.from_url(url) as client:
            before, cpu_before, at = counters(client), cpu_seconds(pids), time.monotonic()
            time.sleep(window)
            after, cpu_after = counters(client), cpu_seconds(pids)
        seconds = time.monotonic() - at
        return {"ready": ready_after, "commands": (after[0] - before[0]) / seconds,
                "publishes": (after[1] - before[1]) / seconds,
                "kib_out": (after[2] - before[2]) / seconds / 1024, "clients": after[3],
                "cpu": 100 * (cpu_after - cpu_before) / seconds}  # fmt: skip
    finally:
        stop_all(workers, grace=30)
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,20", help="comma-separated worker counts")
    parser.add_argument("--window", type=float, default=30.0, help="idle seconds measured")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds before the window")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # measure's finally stops all
    call_command("migrate", verbosity=0)
    print(
        f"{'workers':>7} | {'layout':<15} | {'ready s':>7} | {'Redis cmd/s':>11} | "
        f"{'PUBLISH/s':>9} | {'out KiB/s':>9} | {'clients':>7} | {'workers CPU %':>13}"
    )
    for count in (int(size) for size in args.sizes.split(",")):
        for layout in LAYOUTS:
            call_command("flush", interactive=False, verbosity=0)
            got = measure(count, layout, args.window, args.settle)
            print(f"{count:>7} | {layout:<15} | {got['ready']:>7.1f} | {got['commands']:>11.0f} | "
                  f"{got['publishes']:>9.1f} | {got['kib_out']:>9.1f} | {got['clients']:>7.0f} | "
                  f"{got['cpu']:>13.1f}", flush=True)  # fmt: skip
    print(
        f"\nidle workers, a {args.window:g} s window after {args.settle:g} s; this machine has "
        f"{os.cpu_count()} cores (the workers' start shares them)"
    )


if __name__ == "__main__":
    main()
