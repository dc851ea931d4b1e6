"""The usage minutes still in Redis waiting for the workers' flush (controlplane.usage.flush),
read cheaply at scrape time for wharf_usage_unflushed_age_seconds (figures.unflushed_age).

Only key names are read, by SCAN with contracts.usage's pattern, in at most SCAN_CALLS round
trips: a Redis holding more than SCAN_CALLS x SCAN_BATCH keys of any kind is read in part, and
the age is then the oldest of the minutes seen (never more than the true one). The flush
keeps few usage keys (the current minute's and those not yet claimed), so a backlog shows
long before that.
"""

from __future__ import annotations

import logging

import redis

from contracts.usage import USAGE_PREFIX, minute_of

log = logging.getLogger(__name__)

SCAN_BATCH = 1000  # keys Redis looks at per SCAN call
SCAN_CALLS = 100  # round trips per scrape, at most


def waiting_minutes(client: redis.Redis) -> list[int] | None:
    """The epoch minute of every usage hash in Redis, live or claimed by a flush (contracts.
    usage); None when Redis does not answer (the scrape then has no sample, not an error)."""
    minutes: list[int] = []
    cursor = 0
    try:
        for _ in range(SCAN_CALLS):
            cursor, keys = client.scan(cursor, match=f"{USAGE_PREFIX}*", count=SCAN_BATCH)
            minutes += [m for m in map(_minute, keys) if m is not None]
            if cursor == 0:
                break
    except redis.RedisError as exc:
        log.warning("no usage backlog figure: Redis did not answer: %s", exc)
        return None
    return minutes


def _minute(raw: bytes | str) -> int | None:
    key = raw.decode(errors="backslashreplace") if isinstance(raw, bytes) else raw
    try:
        return minute_of(key)
    except ValueError:  # under the prefix but not a usage hash: the flush ignores it too
        return None
