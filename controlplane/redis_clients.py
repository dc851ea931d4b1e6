"""One Redis client, and so one connection pool, per URL and timeout for the process: a new
connection costs about 1 ms of a core (its handshake), and a scheduling pass opened five (its
locks, asks, wake-ups and publish). Keyed by URL, because settings change in tests."""

from __future__ import annotations

from functools import cache

import redis


@cache
def shared(url: str, socket_timeout: float | None = None) -> redis.Redis:
    """The process's client of `url`; never closed by its callers (the pool is shared)."""
    return redis.Redis.from_url(url, socket_timeout=socket_timeout)
