"""A gateway process's parts: started in order when it starts, stopped in reverse."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from contracts.routing import Snapshot
from gateway.config import Settings, listen_address
from gateway.eas.signing import SigningTokens
from gateway.engine_auth import EngineKeys
from gateway.health import RedisHealth
from gateway.limits.admission import Limiter
from gateway.limits.pipelined import PipelinedRedis
from gateway.observe.figures import FiguresRecorder
from gateway.observe.inflight import InflightReporter
from gateway.observe.metrics import Metrics
from gateway.observe.metrics_access import MetricsListener
from gateway.observe.request_log import RequestLog
from gateway.observe.request_rates import RequestRates
from gateway.observe.tracing import Tracing
from gateway.observe.usage import UsageRecorder
from gateway.plane import Plane
from gateway.queues.feeder import Queues
from gateway.queues.online import OnlineElsewhere
from gateway.relay.upstream import Upstream
from gateway.routing.activation import Activator
from gateway.routing.balancer import Balancer
from gateway.routing.canary import TrackSplit
from gateway.routing.engine_figures import EngineFiguresReader
from gateway.routing.groups import GroupSplit
from gateway.routing.mirror import Mirrors
from gateway.routing.snapshot import SnapshotWatcher

# Limits and usage sit on the request path: a Redis that does not answer within this is
# treated as down (limits count in-process) rather than holding requests up.
_REDIS_TIMEOUT_S = 1.0
_REDIS_CONNECTIONS = 128


@dataclass
class Runtime:
    """What the lifespan starts and the handlers share."""

    settings: Settings
    watcher: SnapshotWatcher
    plane: Plane
    activator: Activator  # requests held for services scaled to zero
    rates: RequestRates  # requests/s per service, for the autoscaler
    signing: SigningTokens  # the tokens that may sign EAS calls, opened
    groups: GroupSplit  # service groups: which member takes a call
    mirrors: Mirrors  # the copies of mirrored services' calls (EAS's ServiceMirror)
    tracks: TrackSplit  # canary releases: stable or canary instances for a call
    queues: Queues  # Async services: the store of their queues, and the feeder of instances


def _client(settings: Settings) -> aioredis.Redis:
    return aioredis.Redis(
        connection_pool=aioredis.BlockingConnectionPool.from_url(
            settings.redis_url,
            # redis-py's default pool fails requests beyond 100 connections in use (as a
            # ConnectionError, which would read as an outage); this one makes them wait.
            max_connections=_REDIS_CONNECTIONS,
            timeout=_REDIS_TIMEOUT_S,
            socket_connect_timeout=_REDIS_TIMEOUT_S,
            socket_timeout=_REDIS_TIMEOUT_S,
            # One quick retry rides over a pooled connection that a restarted Redis dropped;
            # more would hold requests up during a real outage.
            retry=Retry(NoBackoff(), 1),
        )
    )


def _metrics_listener(settings: Settings, counters: Metrics) -> MetricsListener | None:
    """The metrics' own listener, where the operator named an address for it."""
    address = listen_address(settings.metrics_listen) if settings.metrics_listen else None
    return MetricsListener(*address, counters.exposition) if address else None


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Runtime]:
    """Every background part of a gateway process, started in order and stopped in reverse."""
    client = _client(settings)
    counters = Metrics()
    watcher: SnapshotWatcher | None = None
    health = RedisHealth(client, lambda: watcher.fallback_description() if watcher else "")
    engine_keys = EngineKeys(settings.secret_key)
    signing = SigningTokens(settings.secret_key)
    balancer = Balancer(settings.cooldown)
    rates = RequestRates()
    groups = GroupSplit()
    mirrors = Mirrors()
    tracks = TrackSplit()
    inflight = InflightReporter(client, balancer, health, qps=rates.rates)
    activator = Activator(
        counters,
        queue=settings.activation_queue,
        timeout=settings.activation_timeout,
        nudge=inflight.nudge,
    )
    inflight.held_by(activator.held)
    figures = EngineFiguresReader(
        client, balancer, health, interval=settings.engine_figures_interval
    )

    request_log = RequestLog(Path(settings.request_log_dir))

    def loaded(snapshot: Snapshot) -> None:
        request_log.seen(snapshot)
        engine_keys.load(snapshot)
        signing.load(snapshot)
        inflight.seen(snapshot)
        figures.seen(snapshot)
        activator.loaded(snapshot)
        groups.loaded(snapshot)
        tracks.loaded(snapshot.services)
        queues.feeder.seen(snapshot)

    watcher = SnapshotWatcher(
        settings.redis_url,
        settings.snapshot_key,
        settings.snapshot_channel,
        settings.snapshot_poll,
        health,
        on_load=loaded,
    )
    pipe = PipelinedRedis(settings.redis_url, _REDIS_TIMEOUT_S)
    limiter = Limiter(
        client,
        pipe,
        health,
        prefix=settings.limits_prefix,
        second_s=settings.second_s,
        minute_s=settings.minute_s,
        lease_ttl=settings.lease_ttl,
        on_down=settings.limits_on_redis_down,
    )
    usage = UsageRecorder(
        client, health, prefix=settings.usage_prefix, interval=settings.usage_flush_interval
    )
    elsewhere = OnlineElsewhere(client, inflight.key)
    queues = Queues(settings, engine_keys, balancer, counters, usage, elsewhere, limiter)
    balancer.on_release = queues.feeder.nudge  # a gap between online calls: queued work
    upstream = Upstream(keepalive_s=settings.upstream_keepalive)
    call_figures = FiguresRecorder(client, health, prefix=settings.figures_prefix)
    tracing = Tracing.to_endpoint(settings.otlp_endpoint)
    plane = Plane(
        upstream, balancer, limiter, usage, counters, engine_keys, settings.answer_caps,
        call_figures, tracing, request_log,
    )  # fmt: skip
    counters.watch(lambda: health.up, watcher.age, lambda: watcher.current.version)
    counters.watch_usage(usage.unflushed_age)
    listener = _metrics_listener(settings, counters)
    health.start()
    await watcher.start()
    limiter.start()
    usage.start()
    call_figures.start()
    inflight.start()
    figures.start()
    queues.start()
    request_log.start()
    try:
        if listener is not None:
            await listener.start()
        yield Runtime(
            settings, watcher, plane, activator, rates, signing, groups, mirrors, tracks, queues
        )
    finally:
        if listener is not None:
            await listener.stop()
        await queues.stop()
        await request_log.stop()
        await figures.stop()
        await mirrors.stop()
        await inflight.stop()
        await watcher.stop()
        await limiter.stop()
        await usage.stop()
        await call_figures.stop()
        await health.stop()
        await plane.upstream.close()
        await pipe.close()
        await client.aclose()
        if tracing is not None:
            await asyncio.to_thread(tracing.shutdown)  # sends the spans still queued
