"""Moves the gateways' per-minute usage counts (contracts.usage) from Redis into UsageRecord.

Each finished minute's hash is renamed to ``…:flushing`` first: the rename is atomic, so a
gateway that counts late for that minute starts a fresh hash (flushed on a later pass) instead
of incrementing one that is being read. The flushing key is deleted only after the database
commits, so a crash in between leaves it for the next pass to recover. The one window left is
a crash after the commit and before the delete, which counts that minute twice.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import UTC, datetime

import redis
from django.db import IntegrityError, transaction
from django.db.models import F

from contracts.usage import FLUSHING_SUFFIX, USAGE_PREFIX, minute_of, parse_field
from controlplane.usage.models import UsageRecord

log = logging.getLogger(__name__)

# Outside USAGE_PREFIX, so the scan for usage hashes never meets it.
LOCK_KEY = "wharf:lock:usage-flush"
LOCK_TTL = 300  # seconds; far longer than a pass, short enough that a dead worker's lapses
# contracts.usage.KINDS -> UsageRecord columns
COLUMNS = {
    "prompt": "prompt_tokens",
    "completion": "completion_tokens",
    "requests": "requests",
    "latency_ms": "latency_ms",
    "ttft_ms": "ttft_ms",
}

Counts = dict[tuple[str, str], dict[str, int]]  # (service, key id) -> {column: count}


def flush_usage(client: redis.Redis, now: float) -> int:
    """Write every finished minute (and any leftover of a crashed pass) to the database.
    Returns how many hashes were written. One pass at a time: two passes recovering the same
    leftover would count it twice."""
    lock = client.lock(LOCK_KEY, timeout=LOCK_TTL, blocking_timeout=0)
    if not lock.acquire():
        return 0
    try:
        return _flush_all(client, current_minute=int(now) // 60)
    finally:
        lock.release()


def _flush_all(client: redis.Redis, current_minute: int) -> int:
    keys = sorted(_usage_keys(client))
    leftovers = [k for k in keys if k.endswith(FLUSHING_SUFFIX)]
    live = [k for k in keys if not k.endswith(FLUSHING_SUFFIX)]
    finished = [k for k in live if minute_of(k) < current_minute]  # the current one still grows
    flushed = sum(_flush(client, key) for key in leftovers)  # before a rename could collide
    for key in finished:
        if _claim(client, key):
            flushed += _flush(client, key + FLUSHING_SUFFIX)
    return flushed


def _usage_keys(client: redis.Redis) -> list[str]:
    keys = []
    for raw in client.scan_iter(match=f"{USAGE_PREFIX}*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else raw
        try:
            minute_of(key)
        except ValueError:
            log.warning("ignoring %s: not a usage hash (contracts.usage)", key)
            continue
        keys.append(key)
    return keys


def _claim(client: redis.Redis, key: str) -> bool:
    """Rename a finished minute to its flushing key. RENAMENX: a flushing key that is still
    there (its delete failed) must never be overwritten; this minute waits for the next pass."""
    try:
        return bool(client.renamenx(key, key + FLUSHING_SUFFIX))
    except redis.ResponseError:  # gone since the scan
        return False


def _flush(client: redis.Redis, key: str) -> int:
    try:
        fields = client.hgetall(key)
    except redis.ResponseError as exc:  # not a hash: leave it for a person to look at
        log.error("cannot flush %s: %s", key, exc)
        return 0
    minute = datetime.fromtimestamp(minute_of(key) * 60, tz=UTC)
    with transaction.atomic():
        for (service, key_id), counts in _counts(key, fields).items():
            _add(minute, service, key_id, counts)
    client.delete(key)
    return 1


def _counts(key: str, fields: dict) -> Counts:
    counts: Counts = defaultdict(dict)
    for raw_field, raw_value in fields.items():
        try:
            service, key_id, kind = parse_field(_text(raw_field))
            value = int(raw_value)
            column = COLUMNS[kind]
        except (ValueError, KeyError):
            log.warning("%s: ignoring field %r = %r", key, raw_field, raw_value)
            continue
        if value > 0:
            counts[(service, key_id)][column] = value
    return counts


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _add(minute: datetime, service: str, key_id: str, counts: dict[str, int]) -> None:
    """Add to the row, creating it first when the minute is new for this service and key."""
    row = UsageRecord.objects.filter(minute=minute, service=service, key_id=key_id)
    increments = {column: F(column) + value for column, value in counts.items()}
    if row.update(**increments):
        return
    try:
        with transaction.atomic():  # a savepoint: a lost race must not abort the whole minute
            UsageRecord.objects.create(minute=minute, service=service, key_id=key_id, **counts)
    except IntegrityError:
        row.update(**increments)
