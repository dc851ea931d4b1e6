"""Rate, token, concurrency and queue limits, counted atomically in Redis across gateways.

Every limit is checked and taken by one Lua script (ADMIT), so one round trip admits or
refuses a request against all of its limits at once, and any number of gateway processes
share the counts exactly. A refused request takes nothing.

Algorithms (all windows slide, all counts are exact):
- requests per second (service) and per minute (API key): a *sliding log*, a sorted set of
  admission times; a request is admitted while fewer than `limit` requests were admitted in
  the last window. Unlike fixed windows it never lets 2x the limit through across a window
  boundary, and unlike token buckets it has no burst allowance on top of the limit.
- tokens per minute (API key): a sliding log of admissions whose amounts (estimated prompt
  tokens + max_tokens) sit in a hash next to a running sum; when the answer's real usage is
  known, the next call replaces the estimate in place, while the entry is still in its window.
- concurrent requests (API key) and outstanding requests per instance (`max_queue_size`):
  a sorted set of leases scored by a deadline. Releasing removes the lease when the answer
  ends (including disconnects and errors); a lease whose gateway died expires by itself
  after `lease_ttl`, while a live gateway renews its leases (RENEW) every third of it.

Ending a request (freeing its leases, correcting its tokens) costs no round trip of its
own when another request follows within 10 ms: it rides along with that request's ADMIT
call, settled before the checks; otherwise the same script runs for it alone.

Redis layout, under `prefix` (``wharf:limit:``), every key expiring once idle:
``svc:<service>:rps`` and ``key:<id>:rpm`` (logs), ``key:<id>:tpm`` (log) with
``key:<id>:tpm:amounts`` (hash; field ``#`` is the sum), ``key:<id>:leases`` and
``instance:<url>:leases``. Times come from Redis (TIME), so gateways' clocks do not matter.

Without Redis (unreachable), the same algorithms run in-process (LocalLimits): each
gateway process then enforces every limit on its own, so N processes admit up to N times
a limit until Redis is back. That keeps the data plane serving through an outage.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
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

from gateway import metrics
from gateway.background import cancel
from gateway.health import UNREACHABLE, RedisHealth
from gateway.pipelined import PipelinedRedis

log = logging.getLogger(__name__)

_LUA_PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# First settles earlier requests (lease releases, token corrections) that rode along, then
# admits this one; settling alone is the same call with every limit 0.
# KEYS: service rps log, key rpm log, key tpm log, key tpm amounts, key leases; the candidate
# instances' lease sets, best first; the lease sets to release from; the (tpm log, amounts)
# pairs to correct.
# ARGV: id, rps, second ms, rpm, tpm, tokens, minute ms, max concurrency, lease ms, queue,
# number of instances, of releases, of corrections; the released ids; (id, tokens) pairs.
# Limits of 0 are not checked. Returns {reason, retry ms, rpm remaining, rpm reset ms,
# tpm remaining, tpm reset ms, chosen instance (1-based, 0: none)}; remaining -1: unlimited.
ADMIT_LUA = (
    _LUA_PRELUDE
    + """
local id = ARGV[1]
local rps, sec = tonumber(ARGV[2]), tonumber(ARGV[3])
local rpm, tpm, tokens, minute = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]),
  tonumber(ARGV[7])
local conc, lease, queue = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local instances, releases, corrections = tonumber(ARGV[11]), tonumber(ARGV[12]),
  tonumber(ARGV[13])

local k, a = 6 + instances, 14
for _ = 1, releases do
  redis.call('ZREM', KEYS[k], ARGV[a])
  k, a = k + 1, a + 1
end
-- a real token count replaces the estimate, while the entry still counts in its window
for _ = 1, corrections do
  local zkey, hkey, member, real = KEYS[k], KEYS[k + 1], ARGV[a], tonumber(ARGV[a + 1])
  if redis.call('ZSCORE', zkey, member) then
    local old = tonumber(redis.call('HGET', hkey, member)) or 0
    redis.call('HSET', hkey, member, real)
    redis.call('HINCRBY', hkey, '#', real - old)
  end
  k, a = k + 2, a + 2
end

local function logged(key, window)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  return redis.call('ZCARD', key)
end

-- ms until the log has room: when its (count - limit + 1)-th oldest entry leaves the window
local function wait_for_room(key, count, limit, window)
  local entry = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
  return tonumber(entry[2]) + window - now
end

local function oldest_leaves(key, window)
  local entry = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if entry[2] then return tonumber(entry[2]) + window - now end
  return 0
end

-- tokens admitted in the window; expired entries leave the running sum as they go
local function tokens_used(zkey, hkey, window)
  local expired = redis.call('ZRANGEBYSCORE', zkey, '-inf', now - window)
  if #expired > 0 then
    local freed = 0
    for i = 1, #expired, 500 do
      local last = math.min(i + 499, #expired)
      local amounts = redis.call('HMGET', hkey, unpack(expired, i, last))
      for j = 1, #amounts do freed = freed + (tonumber(amounts[j]) or 0) end
      redis.call('HDEL', hkey, unpack(expired, i, last))
    end
    redis.call('ZREMRANGEBYSCORE', zkey, '-inf', now - window)
    redis.call('HINCRBY', hkey, '#', -freed)
  end
  return math.max(tonumber(redis.call('HGET', hkey, '#')) or 0, 0)
end

-- ms until `needed` tokens have left the window, oldest entries first
local function wait_for_tokens(zkey, hkey, needed, window)
  local entries = redis.call('ZRANGE', zkey, 0, -1, 'WITHSCORES')
  local freed = 0
  for i = 1, #entries, 2 do
    freed = freed + (tonumber(redis.call('HGET', hkey, entries[i])) or 0)
    if freed >= needed then return tonumber(entries[i + 1]) + window - now end
  end
  return window
end

local function live_leases(key)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return redis.call('ZCARD', key)
end

local rpm_left, rpm_reset, tpm_left, tpm_reset = -1, 0, -1, 0
if rps > 0 then
  local n = logged(KEYS[1], sec)
  if n >= rps then return {1, wait_for_room(KEYS[1], n, rps, sec), -1, 0, -1, 0, 0} end
end
local requests = 0
if rpm > 0 then
  requests = logged(KEYS[2], minute)
  if requests >= rpm then
    local wait = wait_for_room(KEYS[2], requests, rpm, minute)
    return {2, wait, 0, wait, -1, 0, 0}
  end
end
local used = 0
if tpm > 0 then
  used = tokens_used(KEYS[3], KEYS[4], minute)
  if tokens > tpm then return {4, 0, -1, 0, tpm - used, 0, 0} end
  if used + tokens > tpm then
    local wait = wait_for_tokens(KEYS[3], KEYS[4], used + tokens - tpm, minute)
    return {3, wait, -1, 0, tpm - used, wait, 0}
  end
end
if conc > 0 and live_leases(KEYS[5]) >= conc then return {5, 1000, -1, 0, -1, 0, 0} end
local chosen = 0
if queue > 0 then
  for i = 6, 5 + instances do
    if live_leases(KEYS[i]) < queue then chosen = i - 5; break end
  end
  if chosen == 0 then return {6, 1000, -1, 0, -1, 0, 0} end
end

if rps > 0 then
  redis.call('ZADD', KEYS[1], now, id)
  redis.call('PEXPIRE', KEYS[1], sec)
end
if rpm > 0 then
  redis.call('ZADD', KEYS[2], now, id)
  redis.call('PEXPIRE', KEYS[2], minute)
  rpm_left, rpm_reset = rpm - requests - 1, oldest_leaves(KEYS[2], minute)
end
if tpm > 0 then
  redis.call('ZADD', KEYS[3], now, id)
  redis.call('HSET', KEYS[4], id, tokens)
  redis.call('HINCRBY', KEYS[4], '#', tokens)
  redis.call('PEXPIRE', KEYS[3], minute)
  redis.call('PEXPIRE', KEYS[4], minute)
  tpm_left, tpm_reset = tpm - used - tokens, oldest_leaves(KEYS[3], minute)
end
if conc > 0 then
  redis.call('ZADD', KEYS[5], now + lease, id)
  redis.call('PEXPIRE', KEYS[5], lease)
end
if chosen > 0 then
  redis.call('ZADD', KEYS[5 + chosen], now + lease, id)
  redis.call('PEXPIRE', KEYS[5 + chosen], lease)
end
return {0, 0, rpm_left, rpm_reset, tpm_left, tpm_reset, chosen}
"""
)

# KEYS: lease sets. ARGV: lease ms, then the lease id held in each set, aligned with KEYS.
RENEW_LUA = (
    _LUA_PRELUDE
    + """
local lease = tonumber(ARGV[1])
for i = 1, #KEYS do
  if redis.call('ZSCORE', KEYS[i], ARGV[i + 1]) then
    redis.call('ZADD', KEYS[i], 'XX', now + lease, ARGV[i + 1])
    redis.call('PEXPIRE', KEYS[i], lease)
  end
end
return 0
"""
)

# Verdict codes shared by the script and LocalLimits.
ADMITTED, OVER_RPS, OVER_RPM, OVER_TPM, TOO_LARGE, OVER_CONCURRENCY, QUEUE_FULL = range(7)

_REASONS = {
    OVER_RPS: metrics.REASON_SERVICE_RPS,
    OVER_RPM: metrics.REASON_KEY_RPM,
    OVER_TPM: metrics.REASON_KEY_TPM,
    TOO_LARGE: metrics.REASON_KEY_TPM,
    OVER_CONCURRENCY: metrics.REASON_KEY_CONCURRENCY,
    QUEUE_FULL: metrics.REASON_INSTANCE_QUEUE,
}

# The OpenAI SDKs honour retry-after up to 120 s; longer waits would make them give up.
_MAX_RETRY_MS = 120_000
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


@dataclass(frozen=True)
class Demand:
    """What one request asks of the limits; a limit of 0 is no limit."""

    service: str
    rate_limit: int = 0
    key_id: str | None = None
    rpm: int = 0
    tpm: int = 0
    max_concurrency: int = 0
    tokens: int = 0  # estimated prompt tokens + max_tokens
    instances: tuple[str, ...] = ()  # candidate instance urls, best first
    queue_size: int = 0  # outstanding requests per instance

    @property
    def limited(self) -> bool:
        return bool(
            self.rate_limit > 0
            or self.rpm
            or self.tpm
            or self.max_concurrency
            or (self.queue_size and self.instances)
        )


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused, in the words and headers of an OpenAI 429."""

    reason: str  # metric label
    error_type: str
    message: str
    headers: dict[str, str]
    retryable: bool = True


@dataclass
class Admission:
    """A request's hold on the limits: what to send back and what to release at its end."""

    id: str
    refusal: Refusal | None = None
    instance: str | None = None  # chosen by the queue limit; None: any
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    local: bool = False
    leases: list[str] = field(default_factory=list)  # lease sets holding `id`
    token_log: tuple[str, str] | None = None  # (log, amounts) when tokens were counted


@dataclass(frozen=True)
class _Verdict:
    code: int
    retry_ms: int = 0
    rpm_left: int = -1
    rpm_reset_ms: int = 0
    tpm_left: int = -1
    tpm_reset_ms: int = 0
    chosen: int = 0  # 1-based index into the candidate instances

    @classmethod
    def parse(cls, raw: Sequence[int]) -> _Verdict:
        return cls(*(int(v) for v in raw))


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
    ) -> None:
        self._client = client
        self._pipe = pipe  # the per-request calls; `client` loads the scripts
        self._health = health
        self._prefix = prefix
        self._second_ms = max(1, round(second_s * 1000))
        self._minute_ms = max(1, round(minute_s * 1000))
        self._lease_ms = max(1, round(lease_ttl * 1000))
        self._admit = client.register_script(ADMIT_LUA)
        self._renew = client.register_script(RENEW_LUA)
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
        """Move the admission's instance lease to the first of `urls` with room (a failover)."""
        if not demand.queue_size or admission.instance is None:
            admission.instance = None
            return True
        moved = Demand(demand.service, instances=tuple(urls), queue_size=demand.queue_size)
        keys = self._keys(moved)
        verdict: _Verdict | None
        if admission.local:
            verdict = self._local.admit(moved, keys, admission.id, time.monotonic())
        else:
            verdict = await self._remote(moved, keys, admission.id)
        self._drop_leases(admission, [self._instance_key(admission.instance)])
        if verdict is None:
            # Redis went away mid-request: better an uncounted failover than a failed request.
            admission.instance = urls[0]
            return True
        if verdict.code != ADMITTED:
            return False
        admission.instance = urls[verdict.chosen - 1]
        admission.leases.append(keys[4 + verdict.chosen])
        if not admission.local:
            self._held[admission.id] = admission.leases
        return True

    def release(self, admission: Admission, tokens: int | None) -> None:
        """End the request's hold: free its leases, replace its token estimate by `tokens`."""
        if not admission.leases and admission.token_log is None:
            return
        if admission.local:
            self._local.release(admission.leases, admission.id)
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
        return [
            f"{p}svc:{demand.service}:rps",
            f"{p}key:{key}:rpm",
            f"{p}key:{key}:tpm",
            f"{p}key:{key}:tpm:amounts",
            f"{p}key:{key}:leases",
            *(self._instance_key(url) for url in demand.instances if demand.queue_size),
        ]

    def _instance_key(self, url: str) -> str:
        return f"{self._prefix}instance:{url}:leases"

    async def _verdict(self, demand: Demand, keys: list[str], admission: Admission) -> _Verdict:
        verdict = await self._remote(demand, keys, admission.id)
        if verdict is not None:
            return verdict
        admission.local = True
        return self._local.admit(demand, keys, admission.id, time.monotonic())

    async def _remote(self, demand: Demand, keys: list[str], request_id: str) -> _Verdict | None:
        """The script's verdict, or None when Redis cannot give one (counting falls back).

        Pending releases of earlier requests ride along, settled before this admission.
        """
        if not self._health.up:
            return None
        batch = self._take_pending()
        try:
            return _Verdict.parse(await self._call(demand, keys, request_id, batch))
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
            len(keys) - 5,
            len(released_ids),
            len(corrections) // 2,
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
        self, admission: Admission, demand: Demand, keys: list[str], verdict: _Verdict
    ) -> None:
        if verdict.code != ADMITTED:
            admission.refusal = _refusal(demand, verdict)
            return
        admission.headers = _limit_headers(demand, verdict)
        if demand.tpm:
            admission.token_log = (keys[2], keys[3])
        if demand.max_concurrency:
            admission.leases.append(keys[4])
        if verdict.chosen:
            admission.instance = demand.instances[verdict.chosen - 1]
            admission.leases.append(keys[4 + verdict.chosen])
        if admission.leases and not admission.local:
            self._held[admission.id] = admission.leases

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
        keys = [f"{self._prefix}-"] * 5  # untouched: every limit is 0
        while batch := self._take_pending():
            try:
                await self._call(idle, keys, "-", batch)
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


class _TokenLog:
    def __init__(self) -> None:
        self.entries: deque[tuple[float, str]] = deque()
        self.amounts: dict[str, int] = {}
        self.used = 0


class LocalLimits:
    """The script's algorithms for this process alone: the fallback while Redis is down."""

    def __init__(self, second_s: float, minute_s: float) -> None:
        self._second = second_s
        self._minute = minute_s
        self._logs: dict[str, deque[tuple[float, str]]] = {}
        self._tokens: dict[str, _TokenLog] = {}
        self._leases: dict[str, set[str]] = {}

    def admit(self, demand: Demand, keys: list[str], request_id: str, now: float) -> _Verdict:
        if demand.rate_limit > 0:
            log_ = self._log(keys[0], now, self._second)
            if len(log_) >= demand.rate_limit:
                wait = self._wait_for_room(log_, demand.rate_limit, self._second, now)
                return _Verdict(OVER_RPS, wait)
        if demand.rpm:
            requests = self._log(keys[1], now, self._minute)
            if len(requests) >= demand.rpm:
                wait = self._wait_for_room(requests, demand.rpm, self._minute, now)
                return _Verdict(OVER_RPM, wait, 0, wait)
        if demand.tpm:
            tokens = self._token_log(keys[2], now)
            if demand.tokens > demand.tpm:
                return _Verdict(TOO_LARGE, 0, -1, 0, demand.tpm - tokens.used)
            if tokens.used + demand.tokens > demand.tpm:
                wait = self._wait_for_tokens(tokens, tokens.used + demand.tokens - demand.tpm, now)
                return _Verdict(OVER_TPM, wait, -1, 0, demand.tpm - tokens.used, wait)
        if demand.max_concurrency and len(self._leases.get(keys[4], ())) >= demand.max_concurrency:
            return _Verdict(OVER_CONCURRENCY, 1000)
        chosen = 0
        if demand.queue_size:
            for index, key in enumerate(keys[5:], start=1):
                if len(self._leases.get(key, ())) < demand.queue_size:
                    chosen = index
                    break
            else:
                return _Verdict(QUEUE_FULL, 1000)
        return self._take(demand, keys, request_id, now, chosen)

    def _take(
        self, demand: Demand, keys: list[str], request_id: str, now: float, chosen: int
    ) -> _Verdict:
        rpm_left = rpm_reset = -1
        tpm_left = tpm_reset = -1
        if demand.rate_limit > 0:
            self._logs[keys[0]].append((now, request_id))
        if demand.rpm:
            requests = self._logs[keys[1]]
            requests.append((now, request_id))
            rpm_left = demand.rpm - len(requests)
            rpm_reset = _ms(requests[0][0] + self._minute - now)
        if demand.tpm:
            tokens = self._tokens[keys[2]]
            tokens.entries.append((now, request_id))
            tokens.amounts[request_id] = demand.tokens
            tokens.used += demand.tokens
            tpm_left = demand.tpm - tokens.used
            tpm_reset = _ms(tokens.entries[0][0] + self._minute - now)
        if demand.max_concurrency:
            self._leases.setdefault(keys[4], set()).add(request_id)
        if chosen:
            self._leases.setdefault(keys[4 + chosen], set()).add(request_id)
        return _Verdict(ADMITTED, 0, rpm_left, rpm_reset, tpm_left, tpm_reset, chosen)

    def release(self, leases: list[str], request_id: str) -> None:
        for key in leases:
            held = self._leases.get(key)
            if held is not None:
                held.discard(request_id)
                if not held:
                    del self._leases[key]

    def correct(self, key: str, request_id: str, tokens: int) -> None:
        log_ = self._tokens.get(key)
        if log_ is not None and request_id in log_.amounts:
            log_.used += tokens - log_.amounts[request_id]
            log_.amounts[request_id] = tokens

    def _log(self, key: str, now: float, window: float) -> deque[tuple[float, str]]:
        entries = self._logs.setdefault(key, deque())
        while entries and entries[0][0] <= now - window:
            entries.popleft()
        return entries

    def _token_log(self, key: str, now: float) -> _TokenLog:
        tokens = self._tokens.setdefault(key, _TokenLog())
        while tokens.entries and tokens.entries[0][0] <= now - self._minute:
            _, gone = tokens.entries.popleft()
            tokens.used -= tokens.amounts.pop(gone, 0)
        return tokens

    @staticmethod
    def _wait_for_room(
        entries: deque[tuple[float, str]], limit: int, window: float, now: float
    ) -> int:
        return _ms(entries[len(entries) - limit][0] + window - now)

    def _wait_for_tokens(self, tokens: _TokenLog, needed: int, now: float) -> int:
        freed = 0
        for at, request_id in tokens.entries:
            freed += tokens.amounts.get(request_id, 0)
            if freed >= needed:
                return _ms(at + self._minute - now)
        return _ms(self._minute)


def _ms(seconds: float) -> int:
    return max(0, math.ceil(seconds * 1000))


def _limit_headers(demand: Demand, verdict: _Verdict) -> list[tuple[bytes, bytes]]:
    """OpenAI's x-ratelimit-* headers for the key's per-minute limits."""
    headers: list[tuple[bytes, bytes]] = []
    if demand.rpm and verdict.rpm_left >= 0:
        headers += [
            (b"x-ratelimit-limit-requests", str(demand.rpm).encode()),
            (b"x-ratelimit-remaining-requests", str(verdict.rpm_left).encode()),
            (b"x-ratelimit-reset-requests", duration(verdict.rpm_reset_ms).encode()),
        ]
    if demand.tpm and verdict.tpm_left >= 0:
        headers += [
            (b"x-ratelimit-limit-tokens", str(demand.tpm).encode()),
            (b"x-ratelimit-remaining-tokens", str(max(verdict.tpm_left, 0)).encode()),
            (b"x-ratelimit-reset-tokens", duration(verdict.tpm_reset_ms).encode()),
        ]
    return headers


def duration(ms: int) -> str:
    """A reset time as OpenAI writes it: "20ms", "1.5s", "6m0s"."""
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:g}s"
    minutes, rest = divmod(ms, 60_000)
    return f"{minutes}m{rest // 1000}s"


def _retry_headers(retry_ms: int) -> dict[str, str]:
    wait = min(max(retry_ms, 1), _MAX_RETRY_MS)
    # retry-after-ms is what the OpenAI SDKs read first; retry-after is for everyone else.
    return {"retry-after": str(math.ceil(wait / 1000)), "retry-after-ms": str(wait)}


def _refusal(demand: Demand, verdict: _Verdict) -> Refusal:
    code, wait = verdict.code, verdict.retry_ms
    # A request larger than the whole budget never fits: no retry hint for it.
    headers = {} if code == TOO_LARGE else _retry_headers(wait)
    headers.update((k.decode(), v.decode()) for k, v in _refused_limit_headers(demand, verdict))
    after = f"Retry in {max(wait, 1) / 1000:.3g} s."
    key = f"API key '{demand.key_id}'"
    if code == OVER_RPS:
        message = (
            f"Service '{demand.service}' rate limit of {demand.rate_limit} requests per second "
            f"reached. {after}"
        )
        return Refusal(_REASONS[code], "requests", message, headers)
    if code == OVER_RPM:
        message = f"{key}: requests per minute limit of {demand.rpm} reached. {after}"
        return Refusal(_REASONS[code], "requests", message, headers)
    if code == OVER_TPM:
        message = (
            f"{key}: tokens per minute limit of {demand.tpm} reached: this request needs about "
            f"{demand.tokens} tokens (prompt estimate + max_tokens) and "
            f"{max(verdict.tpm_left, 0)} are left. {after}"
        )
        return Refusal(_REASONS[code], "tokens", message, headers)
    if code == TOO_LARGE:
        message = (
            f"Request too large for {key}: it needs about {demand.tokens} tokens (prompt "
            f"estimate + max_tokens) but the tokens per minute limit is {demand.tpm}. "
            "Lower max_tokens or shorten the prompt."
        )
        return Refusal(_REASONS[code], "tokens", message, headers, retryable=False)
    if code == OVER_CONCURRENCY:
        message = (
            f"{key}: concurrent requests limit of {demand.max_concurrency} reached. Retry when "
            "one of its requests has finished."
        )
        return Refusal(_REASONS[code], "rate_limit_error", message, headers)
    message = (
        f"Service '{demand.service}' is at capacity: every instance has its queue limit of "
        f"{demand.queue_size} outstanding requests. {after}"
    )
    return Refusal(_REASONS[code], "rate_limit_error", message, headers)


def _refused_limit_headers(demand: Demand, verdict: _Verdict) -> list[tuple[bytes, bytes]]:
    if verdict.code == OVER_RPM:
        return _limit_headers(demand, _Verdict(ADMITTED, 0, 0, verdict.rpm_reset_ms))
    if verdict.code in (OVER_TPM, TOO_LARGE):
        return _limit_headers(
            Demand(demand.service, tpm=demand.tpm),
            _Verdict(ADMITTED, 0, -1, 0, max(verdict.tpm_left, 0), verdict.tpm_reset_ms),
        )
    return []
