"""The routing snapshot at fleet size (issue 31: "snapshot publish and gateway reload at 5,000
instances, ≤ 100 ms each, or incremental"), without simulated nodes: N services of ten ready
instances each are written straight into a fresh database, and the control plane's own
functions publish while a real gateway process serves:

    .venv/bin/python benchmarks/snapshot_scale.py [--services 500] [--times 10]

Printed beside the 100 ms target, medians: the whole build and write (`publish_snapshot`
forced, what a drain or an API write asks), a scheduling pass's publish after one instance
left or rejoined routing (`publish_for`: that entry alone), one after a service came or went
(its entry, the keys and groups again), and the gateway's reload: from the write until its
/healthz serves that version (polled every 2 ms). DATABASE_URL (default the PostgreSQL database
`wharf_fleetsim`) is migrated and flushed; Redis is a redis-server of the run's own.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DATABASE_URL", "postgresql://wharf:wharf@127.0.0.1:5432/wharf_fleetsim")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
import redis  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import override_settings  # noqa: E402

from benchmarks.fleet_sim.stack import free_port, private_redis, wait_for  # noqa: E402
from contracts.routing import SNAPSHOT_KEY  # noqa: E402
from controlplane.services.models import Instance, Service  # noqa: E402
from controlplane.services.routing import publish_for, publish_snapshot  # noqa: E402
from controlplane.tokens.models import ApiKey  # noqa: E402
from controlplane.workspaces.models import DEFAULT, Workspace  # noqa: E402

TARGET_MS = 100.0


def spec(name: str) -> dict:
    return {"name": name, "containers": [{"image": "fleetsim/engine:1", "command": "serve",
            "port": 8000}], "metadata": {"instance": 10}}  # fmt: skip


def fill(services: int) -> None:
    """`services` services of ten ready instances each, and a key for every service."""
    workspace = Workspace.objects.get_or_create(name=DEFAULT)[0]
    rows = Service.objects.bulk_create(
        Service(name=f"svc_{i:04d}", workspace=workspace, spec=spec(f"svc_{i:04d}"))
        for i in range(services)
    )
    Instance.objects.bulk_create(
        Instance(service=row, name=f"{row.name}-{j:02d}", node=f"n{i % 500}", runtime="process",
                 spec_hash="h", state="ready", url=f"http://10.0.{i % 250}.{j}:{20000 + i}")
        for i, row in enumerate(rows) for j in range(10)
    )  # fmt: skip
    owner = get_user_model().objects.create_user("snapshot-bench")
    ApiKey.issue(owner, workspace, "every service")


class Gateway:
    """A gateway process on the run's Redis, and when it first served each version."""

    def __init__(self, redis_url: str, home: Path) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PYTHONPATH": str(REPO), "REDIS_URL": redis_url,
               "WHARF_HOME": str(home), "WHARF_TOKEN_KEY": settings.WHARF_TOKEN_KEY}  # fmt: skip
        self.log = home / "gateway.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO, env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        wait_for(lambda: httpx.get(f"{self.url}/healthz", timeout=2).is_success, 60, "gateway")
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        with httpx.Client(timeout=2, trust_env=False) as http:
            while not self._stop.wait(0.002):
                try:
                    version = int(http.get(f"{self.url}/healthz").json()["snapshot_version"])
                except (httpx.HTTPError, KeyError, ValueError):
                    continue
                self.seen.setdefault(version, time.monotonic())

    def served_after(self, version: int, since: float) -> float | None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if version in self.seen:
                return self.seen[version] - since
            time.sleep(0.001)
        return None

    def stop(self) -> None:
        self._stop.set()
        self.process.terminate()
        self.process.wait(15)


def timed(times: int, step: Callable[[int], None]) -> list[float]:
    took = []
    for i in range(times):
        began = time.monotonic()
        step(i)
        took.append(time.monotonic() - began)
        time.sleep(0.05)
    return took


def version(client: redis.Redis) -> int:
    head = re.match(rb'^\{"version": (\d+)', client.getrange(SNAPSHOT_KEY, 0, 40) or b"")
    return int(head.group(1)) if head else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=500, help="ten instances each")
    parser.add_argument("--times", type=int, default=10)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    home = Path(tempfile.mkdtemp(prefix="snapshot-scale-"))
    server, url = private_redis(home)
    gateway = None
    try:
        with override_settings(REDIS_URL=url):
            fill(args.services)
            client = redis.Redis.from_url(url)
            publish_snapshot(force=True)
            gateway = Gateway(url, home)
            one = Instance.objects.filter(service__name="svc_0000").first()
            assert one is not None
            figures: dict[str, list[float]] = {"whole build, forced": [], "gateway reload": []}

            def whole(_: int) -> None:
                began = time.monotonic()
                publish_snapshot(force=True)
                written = time.monotonic()
                figures["whole build, forced"].append(written - began)
                served = gateway.served_after(version(client), written)
                if served is not None:
                    figures["gateway reload"].append(served)

            def entry(i: int) -> None:
                state = "unknown" if i % 2 == 0 else "ready"
                Instance.objects.filter(pk=one.pk).update(state=state)
                publish_for("svc_0000")

            def comes_and_goes(i: int) -> None:
                name = f"new_{i // 2:04d}"
                if i % 2 == 0:
                    Service.objects.create(name=name, workspace=one.service.workspace,
                                           spec=spec(name))  # fmt: skip
                else:
                    Service.objects.filter(name=name).delete()
                publish_for(name)

            for _ in range(args.times):
                whole(0)
            figures["one entry changed (publish_for)"] = timed(args.times, entry)
            figures["a service came or went (publish_for)"] = timed(args.times, comes_and_goes)
    finally:
        if gateway is not None:
            gateway.stop()
        server.terminate()
        server.wait(10)
    instances = Instance.objects.count()
    print(f"\n{args.services} services, {instances} instances; medians of {args.times}, ms")
    print(f"{'figure':42} | {'ms':>7} | target ≤{TARGET_MS:.0f}")
    for name, values in figures.items():
        ms = statistics.median(values) * 1000 if values else float("nan")
        verdict = "ok" if ms <= TARGET_MS else "MISS"
        print(f"{name:42} | {ms:7.1f} | {verdict}")


if __name__ == "__main__":
    main()
