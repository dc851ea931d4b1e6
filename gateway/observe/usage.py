"""Token usage per service, API key and minute, counted into Redis as contracts.usage lays out.

Counts gather in memory and go to Redis in one pipeline every `interval` seconds, so a busy
gateway adds no round trip per request. If Redis is unreachable they stay in memory (one
number per minute, service, key and kind, so it grows slowly) and go out once it is back:
nothing is lost while the gateway keeps running. A late batch lands in its own minute's
hash, which the control plane's flush then picks up on its next pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import suppress

import redis.asyncio as aioredis

from contracts.usage import USAGE_PREFIX, usage_field, usage_key
from gateway.background import cancel, flush_every
from gateway.health import RedisHealth

log = logging.getLogger(__name__)


class UsageRecorder:
    def __init__(
        self,
        client: aioredis.Redis,
        health: RedisHealth,
        *,
        prefix: str = USAGE_PREFIX,
        interval: float = 1.0,
    ) -> None:
        self._client = client
        self._health = health
        self._prefix = prefix
        self._interval = interval
        self._pending: dict[tuple[str, str], int] = {}
        self._oldest: float | None = None  # monotonic time of the oldest count not in Redis
        self._task: asyncio.Task[None] | None = None

    def add(
        self,
        service: str,
        key_id: str,
        prompt: int,
        completion: int,
        latency_ms: int = 0,
        ttft_ms: int = 0,
        batch: bool = False,
    ) -> None:
        """Count one answered request, its tokens and its timings in the current minute (the
        timings as sums: the console divides by requests for averages)."""
        hash_key = self._prefix + usage_key(time.time()).removeprefix(USAGE_PREFIX)
        amounts: tuple[tuple[str, int], ...] = (
            ("requests", 1), ("prompt", prompt), ("completion", completion),
            ("latency_ms", latency_ms), ("ttft_ms", ttft_ms),
        )  # fmt: skip
        if batch:  # a request of an OpenAI batch: counted again apart (contracts.usage)
            amounts += (
                ("batch_requests", 1), ("batch_prompt", prompt), ("batch_completion", completion),
            )  # fmt: skip
        if self._oldest is None:
            self._oldest = time.monotonic()
        for kind, amount in amounts:
            if amount:
                entry = (hash_key, usage_field(service, key_id, kind))
                self._pending[entry] = self._pending.get(entry, 0) + amount

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="wharf-usage-flush")

    async def stop(self) -> None:
        await cancel(self._task)
        if self._pending and self._health.up:
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.flush(), 2.0)
        if self._pending:
            log.warning("stopping with usage counts Redis never got: %s", self._pending)

    async def flush(self) -> None:
        """Send the counts so far; on failure they stay pending (and the error is raised).

        At least once: a pipeline that Redis ran but whose reply timed out is sent again,
        counting twice; that is rarer, and cheaper to explain, than counts silently lost.
        """
        batch, self._pending = self._pending, {}
        oldest, self._oldest = self._oldest, None
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for (hash_key, field), amount in batch.items():
                    pipe.hincrby(hash_key, field, amount)
                await pipe.execute()
        except BaseException:
            for entry, amount in batch.items():
                self._pending[entry] = self._pending.get(entry, 0) + amount
            if oldest is not None:  # counts added meanwhile are younger
                self._oldest = oldest
            raise

    def unflushed_age(self) -> float:
        """Seconds the oldest count not yet in Redis has waited; 0 when all are in. It grows
        while Redis is unreachable or refuses the writes: the usage flush falling behind
        (wharf_gateway_usage_unflushed_age_seconds, deploy/prometheus/alerts.yaml)."""
        return 0.0 if self._oldest is None else time.monotonic() - self._oldest

    async def _run(self) -> None:
        await flush_every(self._interval, lambda: self._pending, self._health, self.flush,
                          "usage counts")  # fmt: skip
