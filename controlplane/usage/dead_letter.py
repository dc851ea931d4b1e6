"""Where the usage flush sets aside what it cannot write, so that it stops meeting it.

Poison (controlplane.usage.entries) goes to ``wharf:usage-dead-letter:<flushing key's
suffix>``: a hash with the fields exactly as the gateways wrote them, next to
``…:why``, a hash of each entry's reason. A whole usage key that cannot be read as one (not a
hash, a minute past year 9999, a name too long to record) is renamed there as it is. Both
expire after DEAD_LETTER_TTL: long enough for a person to look (each is also logged as an
error), short enough that poison arriving every minute cannot fill Redis. The prefix is
outside USAGE_PREFIX's pattern, so the flush never scans what it set aside.

Each flushing key is unique to one claim, so writing the same poison again (a pass that
crashed before its commit is redone) overwrites it with the same values.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis

from contracts.usage import USAGE_PREFIX
from controlplane.usage.entries import Poison

log = logging.getLogger(__name__)

DEAD_LETTER_PREFIX = "wharf:usage-dead-letter:"
DEAD_LETTER_TTL = 7 * 24 * 3600  # seconds
WHOLE_KEY = "*"  # the label in `…:why` when the whole key was set aside


def dead_letter_key(key: str) -> str:
    return DEAD_LETTER_PREFIX + key.removeprefix(USAGE_PREFIX)


def why_key(key: str) -> str:
    return dead_letter_key(key) + ":why"


def set_aside(client: redis.Redis, key: str, poison: Iterable[Poison]) -> None:
    """Copy the poison of the flushing key `key` to its dead letter (the key itself is
    deleted by the flush, with the entries it wrote)."""
    poison = list(poison)
    if not poison:
        return
    dead, why = dead_letter_key(key), why_key(key)
    with client.pipeline(transaction=True) as pipe:
        for item in poison:
            for field, value in item.fields.items():
                pipe.hset(dead, field, value)
            pipe.hset(why, item.label, item.reason)
        pipe.expire(dead, DEAD_LETTER_TTL)
        pipe.expire(why, DEAD_LETTER_TTL)
        pipe.execute()
    for item in poison:
        log.error("usage %s: set aside %s in %s: %s", key, item.label, dead, item.reason)


def move_aside(client: redis.Redis, key: str, reason: str) -> None:
    """Rename the whole usage key `key` to its dead letter."""
    dead, why = dead_letter_key(key), why_key(key)
    with client.pipeline(transaction=True) as pipe:
        pipe.rename(key, dead)
        pipe.hset(why, WHOLE_KEY, reason)
        pipe.expire(dead, DEAD_LETTER_TTL)
        pipe.expire(why, DEAD_LETTER_TTL)
        pipe.execute()
    log.error("usage %s: set aside whole, as %s: %s", key, dead, reason)
