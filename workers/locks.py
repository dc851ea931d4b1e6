"""Redis locks: one reconcile pass per service at a time, one allocator per node."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis
from django.conf import settings

# Longer than any pass: staging a large model happens inside one (storage has its own file
# lock, so an expired lock costs a duplicate pass, never a corrupt cache).
LOCK_TTL = 600


def client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


@contextmanager
def node_lock(purpose: str, timeout: float = 60) -> Iterator[None]:
    """Held while a decision about this node's shared resources is made and acted on."""
    lock = client().lock(f"wharf:node:{settings.WHARF_NODE_NAME}:{purpose}", timeout=LOCK_TTL,
                         blocking_timeout=timeout)  # fmt: skip
    if not lock.acquire():
        raise TimeoutError(f"node lock {purpose!r} busy for {timeout} s")
    try:
        yield
    finally:
        lock.release()
