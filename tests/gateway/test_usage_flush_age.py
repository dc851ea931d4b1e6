"""The age of the oldest usage count not yet in Redis (gateway.observe.usage.UsageRecorder): what
deploy/prometheus/alerts.yaml's WharfUsageFlushBehind watches, against a real Redis and one
that is not there."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.health import RedisHealth
from gateway.observe.metrics import Metrics
from gateway.observe.usage import UsageRecorder

pytestmark = pytest.mark.timeout(30)


def recorder(url: str) -> tuple[UsageRecorder, aioredis.Redis, str]:
    client = aioredis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    prefix = f"wharf:test:{uuid.uuid4().hex}:usage:"
    return UsageRecorder(client, RedisHealth(client, lambda: ""), prefix=prefix), client, prefix


def test_the_age_is_zero_until_a_count_waits_and_again_once_redis_has_it(redis_url):
    async def scenario() -> None:
        usage, client, prefix = recorder(redis_url)
        assert usage.unflushed_age() == 0.0
        usage.add("chat", "k1", prompt=3, completion=4)
        await asyncio.sleep(0.05)
        usage.add("chat", "k1", prompt=1, completion=1)  # a younger count: the age is the first's
        assert usage.unflushed_age() >= 0.05
        await usage.flush()
        assert usage.unflushed_age() == 0.0
        keys = [key async for key in client.scan_iter(f"{prefix}*")]
        assert len(keys) == 1
        await client.delete(*keys)
        await client.aclose()

    asyncio.run(scenario())


def test_the_age_keeps_growing_while_redis_refuses_the_counts():
    async def scenario() -> None:
        usage, client, _ = recorder("redis://127.0.0.1:1/0")  # nothing listens there
        usage.add("chat", "k1", prompt=3, completion=4)
        started = time.monotonic()
        await asyncio.sleep(0.05)
        with pytest.raises(RedisConnectionError):
            await usage.flush()
        assert usage.unflushed_age() >= time.monotonic() - started
        await client.aclose()

    asyncio.run(scenario())


def test_the_gateway_exports_the_age_at_scrape_time():
    metrics = Metrics()
    ages = iter([0.0, 42.5])
    metrics.watch_usage(lambda: next(ages))
    for expected in ("0.0", "42.5"):
        text = metrics.exposition()[0].decode()
        assert f"wharf_gateway_usage_unflushed_age_seconds {expected}" in text
