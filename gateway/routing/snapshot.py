"""The gateway's copy of the routing snapshot, kept fresh from Redis.

Reload triggers: once at startup, on every message on the snapshot channel (so changes
apply within milliseconds), and every `poll` seconds (so a missed message, or a gateway
that was disconnected while one was sent, still converges). When Redis is unreachable the
last good snapshot keeps being served: an outage of the control plane's store must not
take the data plane down with it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import suppress

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from contracts.routing import Snapshot
from gateway.background import cancel
from gateway.health import RedisHealth

log = logging.getLogger(__name__)

# Failing fast lets the loop below own the retry policy (and the once-per-outage warning);
# redis-py's default retries would stall the first load at startup for seconds.
_REDIS_TIMEOUT_S = 2.0


class SnapshotWatcher:
    def __init__(
        self,
        redis_url: str,
        key: str,
        channel: str,
        poll: float,
        health: RedisHealth,
        on_load: Callable[[Snapshot], None] | None = None,
    ) -> None:
        self._redis_url = redis_url
        self._on_load = on_load  # sees each snapshot read before requests do
        self._key = key
        self._channel = channel
        self._poll = poll
        self._health = health
        self._snapshot = Snapshot()
        self._loaded = False
        self._ready = False
        self._read_at = time.monotonic()
        self._redis: aioredis.Redis | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def current(self) -> Snapshot:
        return self._snapshot

    @property
    def loaded(self) -> bool:
        """Whether Redis has answered at least once, i.e. routing is known rather than assumed."""
        return self._loaded

    @property
    def ready(self) -> bool:
        """Whether a routing snapshot has been read (Redis answering with none is not enough:
        a gateway routes nothing until the control plane has published one)."""
        return self._ready

    def age(self) -> float:
        """Seconds since Redis last answered a snapshot read (it grows during an outage)."""
        return time.monotonic() - self._read_at

    def fallback_description(self) -> str:
        """What the gateway does without Redis, for the once-per-outage warning."""
        if not self._loaded:
            return (
                "no routing loaded yet, so requests get 503 until it is reachable. Check REDIS_URL."
            )
        return (
            f"serving the last routing snapshot (version {self._snapshot.version}) until it is "
            "back; limits count per process meanwhile and usage counts wait in memory"
        )

    async def start(self) -> None:
        self._redis = aioredis.from_url(
            self._redis_url,
            socket_connect_timeout=_REDIS_TIMEOUT_S,
            socket_timeout=max(_REDIS_TIMEOUT_S, self._poll + 1),
            retry=Retry(NoBackoff(), 0),
        )
        # Load before serving so the first requests see real routing; a failure here is
        # logged and retried by the watch loop rather than refusing to start.
        await self._reload_logged()
        self._task = asyncio.create_task(self._watch(), name="wharf-snapshot-watcher")

    async def stop(self) -> None:
        await cancel(self._task)
        self._task = None
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    async def reload(self) -> None:
        """Replace the snapshot with the one in Redis; raises RedisError/OSError if unreachable."""
        assert self._redis is not None, "start() first"
        raw = await self._redis.get(self._key)
        self._read_at = time.monotonic()
        self._health.succeeded()
        if raw is None:
            # Nothing published yet (fresh deployment) or the key was lost with a Redis
            # restart: keep what we have rather than forgetting every route.
            self._loaded = True
            return
        try:
            snapshot = Snapshot.from_json(raw)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.error("ignoring malformed routing snapshot in %s: %s", self._key, exc)
            return
        if snapshot.version != self._snapshot.version or not self._loaded:
            log.info(
                "routing snapshot version %d loaded (%d services)",
                snapshot.version,
                len(snapshot.services),
            )
            if snapshot.unreadable:  # left out; every other entry is served
                log.error("routing snapshot entries of the wrong shape: %s", snapshot.unreadable)
        if self._on_load is not None:
            self._on_load(snapshot)
        self._snapshot = snapshot
        self._loaded = self._ready = True

    async def _reload_logged(self) -> None:
        try:
            await self.reload()
        except (RedisError, OSError) as exc:
            self._health.failed(exc)

    async def _watch(self) -> None:
        while True:
            try:
                await self._follow_channel()
            except (RedisError, OSError) as exc:
                self._health.failed(exc)
                # Resubscribe as soon as the health probe sees Redis again, else next poll; the
                # short sleep first keeps an error that is not an outage from spinning.
                await asyncio.sleep(min(self._poll, 0.1))
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._health.wait_up(), self._poll)

    async def _follow_channel(self) -> None:
        """Reload on each channel message and after `poll` quiet seconds; ends only by raising."""
        assert self._redis is not None
        pubsub = self._redis.pubsub()
        try:
            await pubsub.subscribe(self._channel)
            # Subscribing after an outage: changes made meanwhile were never announced to us.
            await self.reload()
            while True:
                # Any message means "the key changed"; its payload (the version) is not needed
                # because the key is the source of truth.
                await pubsub.get_message(ignore_subscribe_messages=True, timeout=self._poll)
                await self.reload()
        finally:
            # Bounded: cancelled mid-subscribe (a stop right after start), closing the pubsub
            # waits on the connection the subscribe still holds, and would wait forever.
            with suppress(RedisError, OSError, TimeoutError):
                await asyncio.wait_for(pubsub.aclose(), _REDIS_TIMEOUT_S)
