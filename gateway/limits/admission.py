"""Rate, token, concurrency and queue limits, counted atomically in Redis across gateways.

Every limit is checked and taken by one Lua script (ADMIT, in gateway.limits.scripts), so one
round trip admits or refuses a request against all of its limits at once, and any number of
gateway processes share the counts exactly. A refused request takes nothing.

Algorithms (all windows slide, all counts are exact):
- requests per second (service) and per minute (API key): a *sliding log*, a sorted set of
  admission times; a request is admitted while fewer than `limit` requests were admitted in
  the last window. Unlike fixed windows it never lets 2x the limit through across a window
  boundary, and unlike token buckets it has no burst allowance on top of the limit.
- tokens per minute (API key): a sliding log of admissions whose amounts (estimated prompt
  tokens + max_tokens) sit in a hash next to a running sum; when the answer's real usage is
  known, the next call replaces the estimate in place, while the entry is still in its window.
- concurrent requests (API key; the service, networking.gateway_policy.concurrency_limit),
  outstanding requests per instance (`max_queue_size`) and the requests an instance works on
  (`worker_threads`): a sorted set of leases scored by a deadline. Releasing removes the
  lease when the answer ends (including disconnects and errors); a lease whose gateway died
  expires by itself after `lease_ttl`, while a live gateway renews its leases (RENEW) every
  third of it.

With worker_threads, a request admitted where every worker slot is taken holds its place in
the instance's queue and waits in the gateway for a slot (`wait_for_slot`,
gateway.limits.slot_waits).

Ending a request (freeing its leases, correcting its tokens) costs no round trip of its
own when another request follows within 10 ms: it rides along with that request's ADMIT
call, settled before the checks; otherwise the same script runs for it alone.

Redis layout, under `prefix` (``wharf:limit:``), every key expiring once idle:
``svc:<service>:rps`` and ``key:<id>:rpm`` (logs), ``key:<id>:tpm`` (log) with
``key:<id>:tpm:amounts`` (hash; field ``#`` is the sum), ``key:<id>:leases``,
``svc:<service>:leases``, ``instance:<url>:leases`` and ``instance:<url>:workers``. Times
come from Redis (TIME), so gateways' clocks do not matter.

Without Redis (unreachable), the same algorithms run in-process (gateway.limits.local): each
gateway process then enforces every limit on its own, so N processes admit up to N times
a limit until Redis is back. That keeps the data plane serving through an outage. An operator
may choose otherwise (WHARF_LIMITS_ON_REDIS_DOWN): `open` admits limited calls uncounted,
`closed` refuses them with a 503 until Redis is back; calls no limit applies to are served
either way.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError

from gateway.background import cancel
from gateway.health import UNREACHABLE, RedisHealth
from gateway.limits.local import LocalLimits
from gateway.limits.pipelined import PipelinedRedis
from gateway.limits.rules import (
    ADMITTED,
    FIRST_INSTANCE,
    KEY_LEASES,
    KEY_TPM,
    KEY_TPM_AMOUNTS,
    LIMITS_DOWN,
    ON_DOWN_CLOSED,
    ON_DOWN_LOCAL,
    ON_DOWN_OPEN,
    RETRY_WHILE_DOWN_MS,
    SERVICE_LEASES,
    Demand,
    Refusal,
    Verdict,
    limit_headers,
    refusal,
)
from gateway.limits.scripts import ADMIT_LUA, RENEW_LUA, SLOT_LUA
from gateway.limits.slot_waits import FIRST_WAIT_S, SlotWaits, backoff

log = logging.getLogger(__name__)

# Releases and corrections waiting for Redis during an outage; beyond this the oldest are
# dropped (their leases then expire by TTL).
_MAX_PENDING = 100_000
# Releases ride along with the next admission (saving a round trip) if one comes within
# this; otherwise they go on their own.
_SETTLE_DELAY_S = 0.01
# At most this many earlier requests are settled by one call.
_SETTLE_BATCH = 200
# Lease sets are sorted sets; this many (set, id) pairs go in one RENEW call.
_RENEW_BATCH = 500


@dataclass
class Admission:
    """A request's hold on the limits: what to send back and what to release at its end."""

    id: str
    refusal: Refusal | None = None
    instance: str | None = None  # chosen by the queue limit; None: any
    slot: str | None = None  # the worker set at `instance` it must take a slot in first
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    local: bool = False
    leases: list[str] = field(default_factory=list)  # lease sets holding `id`
    token_log: tuple[str, str] | None = None  # (log, amounts) when tokens were counted


@dataclass
class _Release:
    id: str
    leases: list[str]
    token_log: tuple[str, str] | None
    tokens: int | None


class Limiter:
    def __init__(
        self,
        client: aioredis.Redis,
        pipe: PipelinedRedis,
        health: RedisHealth,
        *,
        prefix: str,
        second_s: float = 1.0,
        minute_s: float = 60.0,
        lease_ttl: float = 60.0,
        on_down: str = ON_DOWN_LOCAL,
    ) -> None:
        self._on_down = on_down
        self._client = client
        self._pipe = pipe  # the per-request calls; `client` loads the scripts
        self._health = health
        self._prefix = prefix
        self._second_ms = max(1, round(second_s * 1000))
        self._minute_ms = max(1, round(minute_s * 1000))
        self._lease_ms = max(1, round(lease_ttl * 1000))
        self._admit = client.register_script(ADMIT_LUA)
        self._renew = client.register_script(RENEW_LUA)
        self._slot = client.register_script(SLOT_LUA)
        self._waits = SlotWaits()
        self._local = LocalLimits(second_s, minute_s)
        # Unique per process and request: the members of every log and lease set.
        self._ids = map(f"{os.urandom(4).hex()}:{{}}".format, itertools.count())
        self._held: dict[str, list[str]] = {}  # Redis leases of live requests, for RENEW
        self._pending: deque[_Release] = deque(maxlen=_MAX_PENDING)
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None
        self._renewer: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._renewer = asyncio.create_task(self._renew_loop(), name="wharf-lease-renewer")

    async def stop(self) -> None:
        await cancel(self._renewer)
        if self._timer is not None:
            self._timer.cancel()
            self._start_flush()
        if self._flushing is not None and self._health.up:
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._flushing), 2.0)

    async def admit(self, demand: Demand) -> Admission:
        """Admit the request against all its limits at once, or say which one refused it."""
        admission = Admission(id=next(self._ids))
        if not demand.limited:
            return admission
        keys = self._keys(demand)
        verdict = await self._verdict(demand, keys, admission)
        self._settle(admission, demand, keys, verdict)
        return admission

    async def reroute(self, admission: Admission, demand: Demand, urls: Sequence[str]) -> bool:
        """Move the admission's instance leases to the first of `urls` with room (a failover)."""
        if not demand.queue_size or admission.instance is None:
            admission.instance = None
            return True
        moved = Demand(
            demand.service, instances=tuple(urls), queue_size=demand.queue_size,
            workers=demand.workers,
        )  # fmt: skip
        keys = self._keys(moved)
        verdict: Verdict | None
        if admission.local:
            verdict = self._local.admit(moved, keys, admission.id, time.monotonic())
        else:
            verdict = await self._remote(moved, keys, admission.id)
        left = self._instance_keys(admission.instance)
        self._drop_leases(admission, [k for k in admission.leases if k in left])
        admission.slot = None
        if verdict is None:
            # Redis went away mid-request: better an uncounted failover than a failed request.
            admission.instance = urls[0]
            return True
        if verdict.code != ADMITTED:
            return False
        self._take_instance(admission, moved, keys, verdict)
        if not admission.local:
            self._held[admission.id] = admission.leases
        return True

    async def wait_for_slot(self, admission: Admission, workers: int) -> None:
        """Wait until the admission's instance has a free worker slot, and take it.

        Unbounded here: the caller bounds it (the keepalive, the upstream timeout) by
        cancelling; the place in the queue is given back with the admission's other leases.
        """
        key, wait = admission.slot, FIRST_WAIT_S
        if key is None:
            return
        # Held before it is asked for: a request cancelled mid-call (its client gone, its
        # keepalive past) gives back a slot the script may have taken for it. Releasing one
        # never taken removes nothing.
        if key not in admission.leases:
            admission.leases.append(key)
        if not admission.local:
            self._held[admission.id] = admission.leases
        while not await self._take_slot(admission, key, workers):
            await self._waits.sleep(key, wait)
            wait = backoff(wait)
        admission.slot = None

    async def _take_slot(self, admission: Admission, key: str, workers: int) -> bool:
        if admission.local:
            return self._local.take_slot(key, admission.id, workers)
        if not self._health.up:
            return True  # Redis is away: better an uncounted slot than a stuck request
        try:
            taken = await self._evalsha(self._slot, [key], [admission.id, workers, self._lease_ms])
        except UNREACHABLE as exc:
            self._health.failed(exc)
            return True
        except RedisError:
            log.exception("worker slot script failed; letting the request through")
            return True
        return bool(taken)

    def release(self, admission: Admission, tokens: int | None) -> None:
        """End the request's hold: free its leases, replace its token estimate by `tokens`."""
        if not admission.leases and admission.token_log is None:
            return
        if admission.local:
            self._local.release(admission.leases, admission.id)
            self._waits.wake(admission.leases)
            if admission.token_log is not None and tokens is not None:
                self._local.correct(admission.token_log[0], admission.id, tokens)
            return
        self._held.pop(admission.id, None)
        self._pending.append(_Release(admission.id, admission.leases, admission.token_log, tokens))
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        """Settle pending releases soon, unless an admission takes them along first.

        Either way they are applied after the answer is complete, so they delay nobody.
        """
        if self._timer is None and (self._flushing is None or self._flushing.done()):
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(_SETTLE_DELAY_S, self._start_flush)

    def _start_flush(self) -> None:
        self._timer = None
        if self._pending and (self._flushing is None or self._flushing.done()):
            self._flushing = asyncio.create_task(self._flush(), name="wharf-limit-release")

    # -- admission -------------------------------------------------------------------------

    def _keys(self, demand: Demand) -> list[str]:
        p, key = self._prefix, demand.key_id or "-"
        # A key's requests and tokens per minute count per model: each LoRA adapter its own,
        # as OpenAI counts per model; its concurrency is the key's whole.
        model = f"{key}@{demand.adapter}" if demand.adapter else key
        instances = demand.instances if demand.queue_size else ()
        return [
            f"{p}svc:{demand.service}:rps",
            f"{p}key:{model}:rpm",
            f"{p}key:{model}:tpm",
            f"{p}key:{model}:tpm:amounts",
            f"{p}key:{key}:leases",
            f"{p}svc:{demand.service}:leases",
            *(self._instance_keys(url)[0] for url in instances),
            *(self._instance_keys(url)[1] for url in instances if demand.workers),
        ]

    def _instance_keys(self, url: str) -> tuple[str, str]:
        """An instance's lease sets: its outstanding requests, those it works on."""
        return f"{self._prefix}instance:{url}:leases", f"{self._prefix}instance:{url}:workers"

    async def _verdict(self, demand: Demand, keys: list[str], admission: Admission) -> Verdict:
        verdict = await self._remote(demand, keys, admission.id)
        if verdict is not None:
            return verdict
        if demand.tenant_limited and self._on_down == ON_DOWN_CLOSED:
            return Verdict(LIMITS_DOWN, RETRY_WHILE_DOWN_MS)
        if self._on_down == ON_DOWN_OPEN:
            demand = demand.unlimited()  # only the instances' queues still count, here
        admission.local = True
        return self._local.admit(demand, keys, admission.id, time.monotonic())

    async def _remote(self, demand: Demand, keys: list[str], request_id: str) -> Verdict | None:
        """The script's verdict, or None when Redis cannot give one (counting falls back).

        Pending releases of earlier requests ride along, settled before this admission.
        """
        if not self._health.up:
            return None
        batch = self._take_pending()
        try:
            verdict = Verdict.parse(await self._call(demand, keys, request_id, batch))
            self._wake(batch)
            return verdict
        except UNREACHABLE as exc:
            self._health.failed(exc)
        except RedisError:
            # Not an outage but a bug (or a foreign key of the wrong type): counting
            # locally keeps the limits roughly in force while someone looks.
            log.exception("limit script failed; counting this request in-process")
        self._restore(batch)
        return None

    async def _call(
        self, demand: Demand, keys: list[str], request_id: str, batch: list[_Release]
    ) -> list[int]:
        released_keys: list[str] = []
        released_ids: list[str] = []
        corrected_keys: list[str] = []
        corrections: list[str | int] = []
        for item in batch:
            released_keys += item.leases
            released_ids += [item.id] * len(item.leases)
            if item.token_log is not None and item.tokens is not None:
                corrected_keys += item.token_log
                corrections += [item.id, item.tokens]
        args: list[str | int] = [
            request_id,
            max(demand.rate_limit, 0),
            self._second_ms,
            demand.rpm,
            demand.tpm,
            demand.tokens,
            self._minute_ms,
            demand.max_concurrency,
            self._lease_ms,
            demand.queue_size if demand.instances else 0,
            len(demand.instances) if demand.queue_size else 0,
            len(released_ids),
            len(corrections) // 2,
            demand.service_concurrency,
            demand.workers if demand.queue_size else 0,
            *released_ids,
            *corrections,
        ]
        result: list[int] = await self._evalsha(
            self._admit, keys + released_keys + corrected_keys, args
        )
        return result

    async def _evalsha(self, script: AsyncScript, keys: list[str], args: list[str | int]) -> Any:
        try:
            return await self._pipe.call("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            # A restarted (or flushed) Redis forgot the script: load it again, once.
            script.sha = await self._client.script_load(script.script)
            return await self._pipe.call("EVALSHA", script.sha, len(keys), *keys, *args)

    def _wake(self, batch: list[_Release]) -> None:
        """Releases reached Redis: wake this process's waiters for the slots they freed."""
        for item in batch:
            self._waits.wake(item.leases)

    def _take_pending(self) -> list[_Release]:
        if not self._pending:
            return []
        count = min(len(self._pending), _SETTLE_BATCH)
        return [self._pending.popleft() for _ in range(count)]

    def _restore(self, batch: list[_Release]) -> None:
        if batch:
            self._pending.extendleft(reversed(batch))
            self._schedule_flush()

    def _settle(
        self, admission: Admission, demand: Demand, keys: list[str], verdict: Verdict
    ) -> None:
        if verdict.code != ADMITTED:
            admission.refusal = refusal(demand, verdict)
            return
        admission.headers = limit_headers(demand, verdict)
        if demand.tpm:
            admission.token_log = (keys[KEY_TPM], keys[KEY_TPM_AMOUNTS])
        if demand.max_concurrency:
            admission.leases.append(keys[KEY_LEASES])
        if demand.service_concurrency:
            admission.leases.append(keys[SERVICE_LEASES])
        if verdict.chosen:
            self._take_instance(admission, demand, keys, verdict)
        if admission.leases and not admission.local:
            self._held[admission.id] = admission.leases

    @staticmethod
    def _take_instance(
        admission: Admission, demand: Demand, keys: list[str], verdict: Verdict
    ) -> None:
        """Record the instance the verdict chose, its lease, and its worker slot or the
        worker set to wait on."""
        admission.instance = demand.instances[verdict.chosen - 1]
        admission.leases.append(keys[FIRST_INSTANCE - 1 + verdict.chosen])
        if demand.workers:
            slots = keys[FIRST_INSTANCE - 1 + len(demand.instances) + verdict.chosen]
            if verdict.working:
                admission.leases.append(slots)
            else:
                admission.slot = slots

    def _drop_leases(self, admission: Admission, leases: list[str]) -> None:
        admission.leases = [k for k in admission.leases if k not in leases]
        if admission.local:
            self._local.release(leases, admission.id)
        else:
            self._pending.append(_Release(admission.id, leases, None, None))
            self._schedule_flush()

    # -- release, renewal ------------------------------------------------------------------

    async def _flush(self) -> None:
        """Settle what no admission took along, waiting out a Redis outage if need be."""
        idle = Demand("")
        keys = [f"{self._prefix}-"] * FIRST_INSTANCE  # untouched: every limit is 0
        while batch := self._take_pending():
            try:
                await self._call(idle, keys, "-", batch)
                self._wake(batch)
            except UNREACHABLE as exc:
                self._health.failed(exc)
                self._pending.extendleft(reversed(batch))
                await self._health.wait_up()
            except RedisError:
                log.exception("releasing %d limit holds failed; leases expire by TTL", len(batch))

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self._lease_ms / 3000)
            if not self._held or not self._health.up:
                continue
            pairs = [(key, rid) for rid, keys in self._held.items() for key in keys]
            try:
                for start in range(0, len(pairs), _RENEW_BATCH):
                    chunk = pairs[start : start + _RENEW_BATCH]
                    await self._evalsha(
                        self._renew,
                        [k for k, _ in chunk],
                        [self._lease_ms, *(r for _, r in chunk)],
                    )
            except UNREACHABLE as exc:
                self._health.failed(exc)
            except RedisError:
                log.exception("renewing limit leases failed")
