"""Moves the gateways' per-minute usage counts (contracts.usage) from Redis into UsageRecord,
exactly once, whatever point a worker crashes at.

A pass claims each finished minute by renaming its hash to a flushing key unique to that claim
(contracts.usage.flushing_key). The rename is atomic, so a gateway that counts late for that
minute starts a fresh hash (claimed on a later pass) instead of incrementing one being read.
The counts go into the database in one transaction together with a UsageBatch row naming the
flushing key, and the key is deleted only after that commits. A crash therefore leaves a
flushing key either without a UsageBatch row (nothing committed: the next pass writes it) or
with one (committed, not deleted: the next pass only deletes it). The same holds when the
database's or Redis's reply is lost: whatever did happen, the row says so.

No entry can harm another: a field, an entry (one service and key id) or a whole hash the
flush cannot write (controlplane.usage.entries: counts that are not counts, a service name
longer than its column, a sum the database refuses) is set aside in a dead letter that expires
(controlplane.usage.dead_letter), logged, and the rest written as if it were not there. The
good entries and the UsageBatch row commit together, so they stay exactly once; each entry
goes in a savepoint of its own, so one the database refuses rolls back alone.

UsageBatch rows older than BATCH_TTL are pruned at the end of a pass that went through: such a
pass saw every flushing key that old, and either deleted it or raised before the prune.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import redis
from django.db import DataError, IntegrityError, transaction
from django.db.models import F

from contracts.usage import (
    FLUSHING_SUFFIX,
    USAGE_PREFIX,
    flushing_key,
    is_flushing,
    minute_of,
    split_model,
)
from controlplane.services.models import Service
from controlplane.tokens.models import ApiKey
from controlplane.usage.dead_letter import move_aside, set_aside
from controlplane.usage.entries import Entry, Poison, hash_problem, minute_start, sort_fields
from controlplane.usage.models import UsageBatch, UsageRecord

log = logging.getLogger(__name__)

# Outside USAGE_PREFIX, so the scan for usage hashes never meets it.
LOCK_KEY = "wharf:lock:usage-flush"
LOCK_TTL = 300  # seconds; far longer than a pass, short enough that a dead worker's lapses
BATCH_TTL = timedelta(days=1)  # how long a flushed key's UsageBatch row is kept


def flush_usage(client: redis.Redis, now: float) -> int:
    """Write every finished minute (and any leftover of a crashed pass) to the database.
    Returns how many hashes were written. One pass at a time: a second one would only race
    the first for the same keys (UsageBatch's unique name keeps the counts right even then)."""
    lock = client.lock(LOCK_KEY, timeout=LOCK_TTL, blocking_timeout=0)
    if not lock.acquire():
        return 0
    try:
        return _flush_all(client, now=datetime.fromtimestamp(now, tz=UTC))
    finally:
        lock.release()


def _flush_all(client: redis.Redis, now: datetime) -> int:
    current_minute = int(now.timestamp()) // 60
    keys = sorted(_usage_keys(client))
    # A bare "…:flushing" is an older worker's claim: its name is reused by every claim of
    # that minute, so it is claimed again under a unique name before it is written.
    leftovers = [k for k in keys if is_flushing(k) and not k.endswith(FLUSHING_SUFFIX)]
    legacy = [k for k in keys if k.endswith(FLUSHING_SUFFIX)]
    finished = [k for k in keys if not is_flushing(k) and minute_of(k) < current_minute]
    flushed = sum(_flush(client, key, now) for key in leftovers)
    for key in legacy + finished:  # the current minute still grows
        claimed = _claim(client, key)
        if claimed:
            flushed += _flush(client, claimed, now)
    UsageBatch.objects.filter(flushed_at__lt=now - BATCH_TTL).delete()
    return flushed


def _usage_keys(client: redis.Redis) -> list[str]:
    keys = []
    for raw in client.scan_iter(match=f"{USAGE_PREFIX}*", count=1000):
        # not UTF-8: no usage key (only digits follow the prefix), and no reason to stop
        key = raw.decode(errors="backslashreplace") if isinstance(raw, bytes) else raw
        try:
            minute_of(key)
        except ValueError:
            log.warning("ignoring %s: not a usage hash (contracts.usage)", key)
            continue
        keys.append(key)
    return keys


def _claim(client: redis.Redis, key: str) -> str | None:
    """Rename `key` to a flushing key of its own; None when it is gone since the scan. The
    name is new, so RENAMENX only guards against the impossible."""
    claimed = flushing_key(key)
    try:
        return claimed if client.renamenx(key, claimed) else None
    except redis.ResponseError:  # gone since the scan
        return None


def _flush(client: redis.Redis, key: str, now: datetime) -> int:
    """Write the flushing key `key` to the database unless a UsageBatch row says it was, then
    delete it. Returns 1 if it was written now. What it cannot write is set aside
    (controlplane.usage.dead_letter) and the rest written all the same."""
    minute = minute_of(key)
    problem = hash_problem(key, minute)
    try:
        fields = {} if problem else client.hgetall(key)
    except redis.ResponseError as exc:  # WRONGTYPE: not a hash
        problem = f"not a hash: {exc}"
    if problem:
        move_aside(client, key, problem)
        return 0
    entries, poison = sort_fields(fields)
    start = minute_start(minute)
    with transaction.atomic():
        # A second pass racing this one (its lock lapsed) fails on the unique name instead.
        written = not UsageBatch.objects.filter(name=key).exists()
        if written:
            UsageBatch.objects.create(name=key, flushed_at=now)
            for (service, key_id), entry in entries.items():
                refused = _add_or_refuse(start, service, key_id, entry)
                poison.extend([refused] if refused else [])
            # Before the commit: if this raises, nothing is committed and the next pass
            # redoes the whole key; the same poison is written again under the same name.
            set_aside(client, key, poison)
    if not written:
        log.info("%s was written by an earlier pass that did not delete it", key)
    client.delete(key)
    return int(written)


def _add_or_refuse(minute: datetime, service: str, key_id: str, entry: Entry) -> Poison | None:
    """Add the entry in a savepoint of its own; the poison it is if the database refuses it
    (a sum past the column's range, say), so that it takes no other entry down with it.
    A database that cannot be reached is no fault of the entry's: that still raises."""
    try:
        with transaction.atomic():
            _add(minute, service, key_id, entry.counts)
    except (DataError, IntegrityError) as exc:
        return Poison(f"{service}|{key_id}", f"the database refused it: {exc}", entry.fields)
    return None


def _add(minute: datetime, model: str, key_id: str, counts: dict[str, int]) -> None:
    """Add to the row, creating it first when the minute is new for this service (or adapter
    of it: contracts.usage.usage_model) and key."""
    service, adapter = split_model(model)
    row = UsageRecord.objects.filter(minute=minute, service=service, key_id=key_id,
                                     adapter=adapter)  # fmt: skip
    increments = {column: F(column) + value for column, value in counts.items()}
    if row.update(**increments):
        return
    try:
        with transaction.atomic():  # a savepoint: a lost race must not abort the whole minute
            workspace = _workspace_of(service, key_id)
            UsageRecord.objects.create(
                minute=minute, service=service, key_id=key_id, adapter=adapter,
                workspace_id=workspace, **counts,
            )  # fmt: skip
    except IntegrityError:
        row.update(**increments)


def _workspace_of(service: str, key_id: str) -> int | None:
    """The workspace the minute belongs to: its service's, or, if the service is gone by now,
    its key's; None if both are gone (staff still see the row)."""
    found = Service.objects.filter(name=service).values_list("workspace_id", flat=True).first()
    if found is None and key_id.startswith("k") and key_id[1:].isdigit():
        keys = ApiKey.objects.filter(pk=int(key_id[1:]))
        found = keys.values_list("workspace_id", flat=True).first()
    return found
