"""The engines' own load figures, read from Redis for the kv_cache_load policy.

Each node scrapes its engines every contracts.engine_load.INTERVAL seconds and keeps the newest
sample of an instance in ``wharf:engine:latest:<instance>`` (expiring after STALE seconds).
Every `interval` seconds this reads those of the instances that a kv_cache_load policy may
rank (one MGET) and hands them to the balancer by url. An instance without a sample (a new
one, one whose scrape fails, or a sample older than STALE) has no figures: the policy then
ranks it by this gateway's requests in flight alone. So does every instance while Redis is
unreachable: old figures would steer by a load that has long changed.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from contracts import engine_load
from contracts.routing import RoutedService, Snapshot
from gateway.background import cancel
from gateway.health import UNREACHABLE, RedisHealth
from gateway.routing.balancer import Balancer
from gateway.routing.policies import KV_CACHE_LOAD, EngineFigures

log = logging.getLogger(__name__)

INTERVAL = 1.0


def uses_engine_figures(service: RoutedService) -> bool:
    """Whether any of the service's pools is ranked by kv_cache_load, or it serves LoRA
    adapters (routed to engines that have them in a slot)."""
    if service.adapters:
        return True
    if service.pd is None:
        return service.routing == KV_CACHE_LOAD
    return KV_CACHE_LOAD in (service.pd.prefill_policy, service.pd.decode_policy)


def figures_of(
    sample: dict[str, float] | None, now: float, adapters: frozenset[str] = frozenset()
) -> EngineFigures | None:
    """The figures of a decoded sample, or None when it is missing or older than STALE."""
    if sample is None or sample["at"] < now - engine_load.STALE:
        return None
    kv_cache = min(max(sample.get("kv_cache", 0.0), 0.0), 1.0)
    return EngineFigures(
        waiting=max(sample.get("waiting", 0.0), 0.0),
        running=max(sample.get("running", 0.0), 0.0),
        kv_cache=kv_cache,
        adapters=adapters,
    )


class EngineFiguresReader:
    def __init__(
        self,
        client: aioredis.Redis,
        balancer: Balancer,
        health: RedisHealth,
        *,
        interval: float = INTERVAL,
        prefix: str = engine_load.LATEST_PREFIX,
    ) -> None:
        self._client = client
        self._balancer = balancer
        self._health = health
        self._interval = interval
        self._prefix = prefix
        self._instances: dict[str, str] = {}  # instance name -> url, of kv_cache_load services
        self._failing = False
        self._task: asyncio.Task[None] | None = None

    def seen(self, snapshot: Snapshot) -> None:
        """Follow the instances of a snapshot being loaded (the watcher's on_load)."""
        self._instances = {
            i.name: i.url
            for s in snapshot.services.values()
            if uses_engine_figures(s)
            for i in s.instances
        }

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="wharf-engine-figures")

    async def stop(self) -> None:
        await cancel(self._task)
        self._task = None

    async def read(self) -> None:
        """One round: the latest samples of the followed instances, into the balancer."""
        instances = dict(self._instances)
        if not instances:
            self._balancer.figures = {}
            return
        keys = [self._prefix + name for name in instances]
        keys += [engine_load.adapters_key(name) for name in instances]
        values = await self._client.mget(keys)
        samples, adapters = values[: len(instances)], values[len(instances) :]
        now = time.time()
        figures: dict[str, EngineFigures] = {}
        for (_name, url), raw, used in zip(instances.items(), samples, adapters, strict=True):
            found = figures_of(engine_load.decode(raw), now, engine_load.decode_adapters(used))
            if found is not None:
                figures[url] = found
        self._balancer.figures = figures

    async def _run(self) -> None:
        while True:
            try:
                await self.read()
            except UNREACHABLE as exc:
                self._balancer.figures = {}
                self._health.failed(exc)
            except RedisError:
                self._balancer.figures = {}
                if not self._failing:
                    log.exception("reading the engines' load figures failed; retrying")
                self._failing = True
            else:
                self._failing = False
            await asyncio.sleep(self._interval)
