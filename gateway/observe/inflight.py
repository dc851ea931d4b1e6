"""This gateway's requests in flight per instance, reported to Redis as contracts.inflight lays
out, so that the control plane knows when an instance it took out of routing is drained; with
them the autoscaler's signals: requests/s per service (gateway.observe.request_rates) and requests
held per service scaled to zero (gateway.routing.activation).

The counts are the balancer's, which every call to an engine holds from connecting until the
answer's last byte (both legs of prefill/decode routing included). The balancer counts by
URL; names come from the routing snapshots this gateway loaded: the current one, and earlier
ones for instances that still have requests in flight after they left it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import suppress

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from contracts.inflight import (
    INFLIGHT_PREFIX,
    REPORT_INTERVAL,
    REPORT_TTL,
    encode_report,
    new_gateway_id,
    report_key,
)
from contracts.routing import Snapshot
from gateway.background import cancel
from gateway.health import UNREACHABLE, RedisHealth
from gateway.routing.balancer import Balancer

log = logging.getLogger(__name__)

_DELETE_TIMEOUT_S = 2.0


class InflightReporter:
    def __init__(
        self,
        client: aioredis.Redis,
        balancer: Balancer,
        health: RedisHealth,
        *,
        gateway_id: str | None = None,
        prefix: str = INFLIGHT_PREFIX,
        interval: float = REPORT_INTERVAL,
        ttl: int = REPORT_TTL,
        qps: Callable[[], dict[str, float]] = dict,
    ) -> None:
        self._client = client
        self._qps = qps
        self._held: Callable[[], dict[str, int]] = dict
        self._now = asyncio.Event()  # write before the next tick
        self._balancer = balancer
        self._health = health
        self.key = report_key(gateway_id or new_gateway_id(), prefix)
        self._interval = interval
        self._ttl = ttl
        self._names: dict[str, str] = {}  # url -> instance name
        self._current: frozenset[str] = frozenset()  # the urls in the current snapshot
        self._version = 0
        self._failing = False  # a write failed (other than an outage): logged once until one works
        self._task: asyncio.Task[None] | None = None

    def held_by(self, held: Callable[[], dict[str, int]]) -> None:
        """Where the requests held per service come from (gateway.routing.activation, which nudges
        this reporter, so it is made after it)."""
        self._held = held

    def seen(self, snapshot: Snapshot) -> None:
        """Learn the instances of a snapshot being loaded (the watcher's on_load: it runs before
        any request is routed from it, so every url the balancer counts has a name)."""
        urls = {i.url: i.name for s in snapshot.services.values() for i in s.instances}
        self._names.update(urls)
        self._current = frozenset(urls)
        self._version = snapshot.version

    def counts(self) -> dict[str, int]:
        """Requests in flight per instance name; forgets instances that left the snapshot once
        they have none."""
        counts: dict[str, int] = {}
        for url, name in list(self._names.items()):
            n = self._balancer.in_flight(url)
            if n > 0:
                counts[name] = counts.get(name, 0) + n
            elif url not in self._current:
                del self._names[url]
        return counts

    def report(self) -> str:
        return encode_report(time.time(), self._version, self.counts(), self._qps(), self._held())

    def nudge(self) -> None:
        """Write the report now rather than on the next tick (a request was just held)."""
        self._now.set()

    async def write(self) -> None:
        await self._client.set(self.key, self.report(), ex=self._ttl)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="wharf-inflight-report")

    async def stop(self) -> None:
        """Stop reporting and delete this gateway's report: it has nothing in flight any more."""
        await cancel(self._task)
        self._task = None
        with suppress(RedisError, OSError, TimeoutError):
            await asyncio.wait_for(self._client.delete(self.key), _DELETE_TIMEOUT_S)

    async def _run(self) -> None:
        while True:
            try:
                await self.write()
            except UNREACHABLE as exc:
                self._health.failed(exc)  # one warning per outage, shared with the rest
            except Exception:
                # Never fatal: the next tick tries again. Logged once until a write works.
                if not self._failing:
                    log.exception("writing the in-flight report %s failed; retrying", self.key)
                self._failing = True
            else:
                self._health.succeeded()
                if self._failing:
                    log.info("in-flight report %s written again", self.key)
                    self._failing = False
            with suppress(TimeoutError):
                await asyncio.wait_for(self._now.wait(), self._interval)
            self._now.clear()
