"""How much of a burst the placement lock's handoff costs (workers.locks.leased): passes on
several workers each take the lock for a short while (placing) and work as long again
without it (status, publish), and a waiter tries again every RETRY seconds, so a released
lock may stay idle until the next try. Printed
side by side: redis-py's default retry (0.1 s) and Wharf's (workers.locks.RETRY), the burst's
wall time against the time the lock was held, and the waits' p50/p99.

    .venv/bin/python benchmarks/lock_handoff.py [--workers 4] [--passes 25] [--hold-ms 40]
        [--outside-ms 40] [--redis redis://127.0.0.1:6379/11]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django  # noqa: E402

django.setup()

from django.test import override_settings  # noqa: E402

from workers import locks  # noqa: E402


def burst(workers: int, passes: int, hold: float, outside: float) -> tuple[float, list[float]]:
    """Seconds the whole burst took, and each pass's wait for the lock."""
    waits: list[float] = []

    def worker() -> None:
        for _ in range(passes):
            asked = time.monotonic()
            with locks.leased("wharf:bench:placement", wait=60) as held:
                assert held
                waits.append(time.monotonic() - asked)
                time.sleep(hold)
            time.sleep(outside)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.monotonic() - began, waits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--passes", type=int, default=25, help="per worker")
    parser.add_argument("--hold-ms", type=float, default=40.0)
    parser.add_argument("--outside-ms", type=float, default=40.0, help="each pass, unlocked")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/11")
    args = parser.parse_args()
    held = args.workers * args.passes * args.hold_ms / 1000
    print(f"{args.workers} workers x {args.passes} passes, each holding the lock "
          f"{args.hold_ms:g} ms: {held:.2f} s held in all")  # fmt: skip
    print(f"{'retry s':>8} | {'burst s':>8} | {'idle %':>6} | {'wait p50 ms':>11} | wait p99 ms")
    with override_settings(REDIS_URL=args.redis):
        for retry in (0.1, locks.RETRY):
            locks.RETRY = retry
            took, waits = burst(args.workers, args.passes, args.hold_ms / 1000,
                                args.outside_ms / 1000)  # fmt: skip
            p50 = statistics.median(waits) * 1000
            p99 = statistics.quantiles(waits, n=100)[98] * 1000
            idle = (took - held) / took * 100
            print(f"{retry:8g} | {took:8.2f} | {idle:6.1f} | {p50:11.1f} | {p99:.1f}")


if __name__ == "__main__":
    main()
