"""Whether Redis answers, as one verdict shared by everything in the gateway that uses it.

The snapshot watcher, the limiter and the usage recorder all notice outages; sharing one
verdict means one warning per outage (and one line when it ends), whoever noticed first, and
lets the limiter stop trying Redis on the request path while it is down: a probe pings in the
background instead and flips the verdict back as soon as Redis answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.background import cancel

log = logging.getLogger(__name__)

# Errors that mean "Redis is not reachable", as opposed to a bad command or script: only
# these switch the gateway to its fallbacks.
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)


class RedisHealth:
    def __init__(
        self,
        client: aioredis.Redis,
        describe_fallback: Callable[[], str],
        probe_interval: float = 0.5,
    ) -> None:
        self._client = client
        self._describe = describe_fallback
        self._interval = probe_interval
        self._up = asyncio.Event()
        self._up.set()  # assumed until something fails: the first call will tell
        self._down = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def up(self) -> bool:
        return self._up.is_set()

    def failed(self, exc: BaseException) -> None:
        if not self._up.is_set():
            return
        self._up.clear()
        self._down.set()
        log.warning("Redis unreachable (%s); %s", str(exc) or type(exc).__name__, self._describe())

    def succeeded(self) -> None:
        if self._up.is_set():
            return
        self._down.clear()
        self._up.set()
        log.info("Redis reachable again; routing updates, shared limits and usage counts resume")

    async def wait_up(self) -> None:
        await self._up.wait()

    def start(self) -> None:
        self._task = asyncio.create_task(self._probe(), name="wharf-redis-probe")

    async def stop(self) -> None:
        await cancel(self._task)
        self._task = None

    async def _probe(self) -> None:
        while True:
            await self._down.wait()
            await asyncio.sleep(self._interval)
            try:
                await self._client.ping()
            except UNREACHABLE:
                continue
            self.succeeded()
