"""Call figures (contracts.call_figures): each answered call's status, time to first byte and
inter-token latency, per service and track, counted in memory and added to Redis once a
second, so every gateway's calls add up where the control plane reads them.

Figures are measurements, not bills: while Redis is unreachable they wait in memory, and a
slot older than the figures' retention is dropped rather than sent late.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from contracts.call_figures import PREFIX, RETAIN_S, SLOT_S, Figures, key, slot
from gateway.background import cancel, flush_every
from gateway.health import UNREACHABLE, RedisHealth

log = logging.getLogger(__name__)


class FiguresRecorder:
    def __init__(
        self, client: aioredis.Redis, health: RedisHealth, *, prefix: str = PREFIX,
        interval: float = 1.0,
    ) -> None:  # fmt: skip
        self._client = client
        self._health = health
        self._prefix = prefix
        self._interval = interval
        self._pending: dict[tuple[str, str, int], Figures] = {}
        self._task: asyncio.Task[None] | None = None

    def add(
        self, service: str, track: str, status: int, broken: bool,
        ttft_s: float | None, itl_s: float | None,
    ) -> None:  # fmt: skip
        """One answered call (`broken`: its stream was cut short)."""
        entry = (service, track, slot(time.time()))
        figures = self._pending.get(entry)
        if figures is None:
            figures = self._pending[entry] = Figures()
        figures.add(
            status, broken,
            None if ttft_s is None else ttft_s * 1000, None if itl_s is None else itl_s * 1000,
        )  # fmt: skip

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="wharf-figures-flush")

    async def stop(self) -> None:
        await cancel(self._task)
        if self._pending and self._health.up:
            try:
                await asyncio.wait_for(self.flush(), 2.0)
            except (TimeoutError, *UNREACHABLE, RedisError):
                pass  # measurements: the next gateway's figures carry on

    async def flush(self) -> None:
        batch, self._pending = self._pending, {}
        oldest = slot(time.time() - RETAIN_S)
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for (service, track, at), figures in batch.items():
                    name = self._prefix + key(service, track, at).removeprefix(PREFIX)
                    for field, amount in figures.fields().items():
                        pipe.hincrby(name, field, amount)
                    pipe.expire(name, RETAIN_S + SLOT_S)
                await pipe.execute()
        except BaseException:
            for entry, figures in batch.items():  # kept for the next try, unless too old
                if entry[2] >= oldest:
                    self._pending.setdefault(entry, Figures()).merge(figures)
            raise

    async def _run(self) -> None:
        await flush_every(self._interval, lambda: self._pending, self._health, self.flush,
                          "call figures")  # fmt: skip
