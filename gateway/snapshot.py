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
from contextlib import suppress

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from contracts.routing import Snapshot

log = logging.getLogger(__name__)

# Failing fast lets the loop below own the retry policy (and the once-per-outage warning);
# redis-py's default retries would stall the first load at startup for seconds.
_REDIS_TIMEOUT_S = 2.0


class SnapshotWatcher:
    def __init__(self, redis_url: str, key: str, channel: str, poll: float) -> None:
        self._redis_url = redis_url
        self._key = key
        self._channel = channel
        self._poll = poll
        self._snapshot = Snapshot()
        self._loaded = False
        self._redis_down = False
        self._redis: aioredis.Redis | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def current(self) -> Snapshot:
        return self._snapshot

    @property
    def loaded(self) -> bool:
        """Whether Redis has answered at least once, i.e. routing is known rather than assumed."""
        return self._loaded

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
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    async def reload(self) -> None:
        """Replace the snapshot with the one in Redis; raises RedisError/OSError if unreachable."""
        assert self._redis is not None, "start() first"
        raw = await self._redis.get(self._key)
        self._mark_up()
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
        self._snapshot = snapshot
        self._loaded = True

    async def _reload_logged(self) -> None:
        try:
            await self.reload()
        except (RedisError, OSError) as exc:
            self._mark_down(exc)

    async def _watch(self) -> None:
        while True:
            try:
                await self._follow_channel()
            except (RedisError, OSError) as exc:
                self._mark_down(exc)
                await asyncio.sleep(self._poll)

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
            with suppress(RedisError, OSError):
                await pubsub.aclose()

    def _mark_down(self, exc: BaseException) -> None:
        if self._redis_down:
            return
        self._redis_down = True
        if self._loaded:
            log.warning(
                "Redis unreachable (%s); serving the last routing snapshot (version %d) "
                "until it is back",
                exc,
                self._snapshot.version,
            )
        else:
            log.warning(
                "Redis unreachable (%s); no routing loaded yet, so requests get 503 until it is "
                "reachable. Check REDIS_URL.",
                exc,
            )

    def _mark_up(self) -> None:
        if self._redis_down:
            self._redis_down = False
            log.info("Redis reachable again; routing snapshot updates resume")
