"""What this node's instances use of it, sampled every INTERVAL seconds from a thread of the
worker and kept in Redis (contracts.instance_usage) for the autoscaler's `cpu` and `gpu`
strategies: CPU time from the runtime (Docker: the container's cgroup, as `docker stats`
reads it; a process: its process group's), card utilisation from nvidia-smi (one call per pass
for every card). A runtime that gives no CPU figure (Kubernetes: the cluster's) writes none.
Errors are logged once a minute per kind and the loop goes on.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

import redis
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

from contracts import instance_usage
from contracts.allocation import decode_allocation
from controlplane.services.choices import InstanceState
from controlplane.services.models import Instance
from workers.nodes.devices import Runner, run_tool

log = logging.getLogger(__name__)
INTERVAL = 2.0
QUIET = 60.0
UTILISATION_ARGS = ("--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits")


def parse_utilisation(csv_text: str) -> dict[int, float]:
    """nvidia-smi's `index, utilization.gpu` lines as {index: percent}; "[N/A]" is left out."""
    found = {}
    for line in csv_text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) == 2 and cells[0].isdigit():
            try:
                found[int(cells[0])] = float(cells[1])
            except ValueError:
                continue
    return found


def gpu_utilisation(run: Runner = subprocess.run, timeout: float = 5.0) -> dict[int, float]:
    """Every NVIDIA card's utilisation now; {} where there is no nvidia-smi."""
    text = run_tool("nvidia-smi", UTILISATION_ARGS, run, timeout)
    return parse_utilisation(text) if text else {}


class UsageSampler(threading.Thread):
    """Samples node `node`'s ready instances until stop(); `cpu_seconds(name)` is the
    runtime's (None: no figure)."""

    def __init__(
        self,
        node: str,
        cpu_seconds: Callable[[str], float | None],
        redis_url: str | None = None,
        interval: float = INTERVAL,
        utilisation: Callable[[], dict[int, float]] = gpu_utilisation,
    ):
        super().__init__(name="wharf-usage-sampler", daemon=True)
        self.node, self.interval = node, interval
        self.cpu_seconds, self.utilisation = cpu_seconds, utilisation
        url = redis_url or settings.REDIS_URL
        self.store = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        self._readings: dict[str, tuple[float, float]] = {}  # name -> (wall, cpu seconds)
        self._stopped = threading.Event()
        self._logged: dict[str, float] = {}

    def run(self) -> None:
        try:
            while not self._stopped.is_set():
                started = time.monotonic()
                close_old_connections()
                self.sample_once()
                self._stopped.wait(max(0.0, self.interval - (time.monotonic() - started)))
        finally:
            connection.close()

    def stop(self) -> None:
        self._stopped.set()

    def sample_once(self) -> int:
        """One sample of every ready instance of this node; how many were written."""
        try:
            rows = list(Instance.objects.filter(node=self.node, state=InstanceState.READY)
                        .values_list("name", "devices"))  # fmt: skip
        except DatabaseError as exc:
            self._warn("database", "node %s: cannot list its instances: %s", self.node, exc)
            return 0
        cards = self.utilisation() if any(devices for _, devices in rows) else {}
        samples = {}
        for name, devices in rows:
            sample = self._sample(name, devices, cards)
            if sample is not None:
                samples[name] = sample
        self._readings = {n: r for n, r in self._readings.items() if n in dict(rows)}
        if samples:
            try:
                pipe = self.store.pipeline(transaction=False)
                for name, sample in samples.items():
                    pipe.set(instance_usage.key(name), instance_usage.encode(sample),
                             ex=instance_usage.STALE)  # fmt: skip
                pipe.execute()
            except redis.RedisError as exc:
                self._warn("redis", "instance usage not kept: Redis: %s", exc)
                return 0
        return len(samples)

    def _sample(self, name: str, devices: str, cards: dict[int, float]) -> dict | None:
        now = time.time()
        sample: dict[str, float] = {"at": now}
        try:
            cpu = self.cpu_seconds(name)
        except Exception as exc:  # one instance's trouble must not stop the others'
            self._warn(f"cpu {name}", "instance %s: no CPU figure: %s", name, exc)
            cpu = None
        if cpu is not None:
            cores = instance_usage.cores_used(self._readings.get(name), (now, cpu))
            self._readings[name] = (now, cpu)
            if cores is not None:
                sample["cpu_cores"] = cores
        try:
            held: Sequence[int] = decode_allocation(devices)[1] if devices.startswith("gpu") else ()
        except ValueError:
            held = ()
        utilisation = instance_usage.mean_utilisation(held, cards)
        if utilisation is not None:
            sample["gpu_util"] = utilisation
        return sample if len(sample) > 1 else None

    def _warn(self, key: str, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._logged.get(key, -QUIET) < QUIET:
            return
        self._logged[key] = now
        log.warning(message, *args)
