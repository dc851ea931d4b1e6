"""What the benchmark watches while the fleet runs, each from its own thread, from outside
the control plane (it reads what anyone may read):

- the instance rows, every POLL s: when each was first seen placed on a node;
- the routing snapshot: every version published on the gateways' channel, when it was
  announced and which instances it routes;
- the gateway's /healthz: when it first answered with each snapshot version (it has loaded it).

An instance is routed once the gateway has loaded a version that routes it (or a later one):
benchmarks.fleet_sim.figures.first_at_or_after.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import redis
from django.db import connection

from benchmarks.fleet_sim.figures import first_at_or_after
from contracts.routing import SNAPSHOT_CHANNEL, SNAPSHOT_KEY
from controlplane.services.models import Instance

POLL = 0.2  # seconds between looks at the instance rows
GATEWAY_POLL = 0.05  # seconds between looks at the gateway's snapshot version


def routed_names(text: bytes | str) -> tuple[int, set[str]]:
    """A snapshot's version and the names of the instances it routes."""
    data = json.loads(text)
    names = {i["name"] for svc in data.get("services", {}).values() for i in svc["instances"]}
    return int(data["version"]), names


class Watch:
    def __init__(self, redis_url: str, gateway_url: str) -> None:
        self.redis = redis.Redis.from_url(redis_url)
        self.gateway_url = gateway_url
        self.placed: dict[str, float] = {}  # instance → first seen placed
        self.rows: list[tuple[str, str, str]] = []  # (instance, service, node), the last look
        self.announced: dict[int, float] = {}  # snapshot version → when announced
        self.first_routed: dict[str, int] = {}  # instance → first version routing it
        self.loaded: dict[int, float] = {}  # version → when the gateway first served it
        self.paused = threading.Event()  # no looks at the database (steady-state figures)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=t, daemon=True)
                         for t in (self._rows, self._snapshots, self._gateway)]  # fmt: skip
        self._ready = threading.Event()

    def start(self) -> None:
        for thread in self._threads:
            thread.start()
        self._ready.wait(10)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)

    def _rows(self) -> None:
        while not self._stop.wait(POLL):
            if self.paused.is_set():
                continue
            now = time.monotonic()
            rows = list(Instance.objects.values_list("name", "service__name", "node"))
            for name, _, node in rows:
                if node and name not in self.placed:
                    self.placed[name] = now
            self.rows = rows
        connection.close()  # this thread's own

    def _snapshots(self) -> None:
        channel = self.redis.pubsub()
        channel.subscribe(SNAPSHOT_CHANNEL)
        self._ready.set()
        while not self._stop.is_set():
            message = channel.get_message(ignore_subscribe_messages=True, timeout=0.5)
            if message is None:
                continue
            now = time.monotonic()
            text = self.redis.get(SNAPSHOT_KEY)
            if text is None:
                continue
            version, names = routed_names(text)
            self.announced.setdefault(int(message["data"]), now)
            self.announced.setdefault(version, now)
            for name in names:
                self.first_routed.setdefault(name, version)
        channel.close()

    def _gateway(self) -> None:
        with httpx.Client(timeout=2, trust_env=False) as http:
            while not self._stop.wait(GATEWAY_POLL):
                try:
                    version = int(
                        http.get(f"{self.gateway_url}/healthz").json()["snapshot_version"]
                    )
                except (httpx.HTTPError, KeyError, ValueError):
                    continue
                self.loaded.setdefault(version, time.monotonic())

    def routed(self) -> dict[str, float]:
        """Instance → when the gateway first served a snapshot routing it (copies of what the
        threads are still adding to)."""
        return first_at_or_after(dict(self.loaded), dict(self.first_routed))

    def placed_at(self) -> dict[str, float]:
        return dict(self.placed)

    def gateway_loaded(self, version: int, seconds: float) -> float | None:
        """When the gateway first served `version` or a later one (None: not within `seconds`)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            seen = [at for v, at in list(self.loaded.items()) if v >= version]
            if seen:
                return min(seen)
            time.sleep(0.01)
        return None
