"""The admission rules of worker slots, instance queues and the service's concurrency, run as one
table against both implementations: the Lua script in a real Redis, and the in-process
fallback (gateway.limits.local) that a gateway uses while Redis is down."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.health import RedisHealth
from gateway.limits.admission import Admission, Limiter
from gateway.limits.pipelined import PipelinedRedis
from gateway.limits.rules import (
    OVER_SERVICE_CONCURRENCY,
    QUEUE_FULL,
    REASONS,
    Demand,
    instance_bounds,
)

pytestmark = pytest.mark.timeout(30)

WORKING, WAITING = "working", "waiting"
# A step: ("admit", request, expected) where expected is (WORKING | WAITING, instance) or a
# refusal's code; ("release", request); ("slot", request, taken within 0.4 s?); ("reroute",
# request, instances, expected): a failover, its leases moved to the first with room.
ONE = Demand("svc", instances=("a",), workers=2, queue_size=3)
TWO = Demand("svc", instances=("a", "b"), workers=1, queue_size=2)
CAPPED = Demand("svc", service_concurrency=2)
TABLE: dict[str, tuple[Demand, list[tuple[Any, ...]]]] = {
    "workers first, then the queue, then 450": (
        ONE,
        [
            ("admit", "r1", (WORKING, "a")),
            ("admit", "r2", (WORKING, "a")),
            ("admit", "r3", (WAITING, "a")),
            ("admit", "r4", QUEUE_FULL),
            ("slot", "r3", False),
        ],
    ),
    "a freed slot goes to the waiter, not to a newcomer": (
        ONE,
        [
            ("admit", "r1", (WORKING, "a")),
            ("admit", "r2", (WORKING, "a")),
            ("admit", "r3", (WAITING, "a")),
            ("release", "r1"),
            ("admit", "r4", (WAITING, "a")),
            ("slot", "r3", True),
            ("slot", "r4", False),
            ("release", "r2"),
            ("slot", "r4", True),
        ],
    ),
    "a free instance is taken before anyone waits": (
        TWO,
        [
            ("admit", "r1", (WORKING, "a")),
            ("admit", "r2", (WORKING, "b")),
            ("admit", "r3", (WAITING, "a")),
            ("admit", "r4", (WAITING, "b")),
            ("admit", "r5", QUEUE_FULL),
        ],
    ),
    "a failover moves the worker slot, or the place in the queue": (
        TWO,
        [
            ("admit", "r1", (WORKING, "a")),
            ("reroute", "r1", ("b",), (WORKING, "b")),
            ("admit", "r2", (WORKING, "a")),
            ("reroute", "r2", ("b",), (WAITING, "b")),
            ("admit", "r3", (WORKING, "a")),
            ("release", "r1"),
            ("slot", "r2", True),
        ],
    ),
    "the service's concurrency": (
        CAPPED,
        [
            ("admit", "r1", "admitted"),
            ("admit", "r2", "admitted"),
            ("admit", "r3", OVER_SERVICE_CONCURRENCY),
            ("release", "r1"),
            ("admit", "r4", "admitted"),
        ],
    ),
}


def outcome(admission: Admission) -> Any:
    if admission.refusal is not None:
        return next(code for code, reason in REASONS.items() if reason == admission.refusal.reason)
    if admission.instance is None:
        return "admitted"
    return (WAITING if admission.slot else WORKING, admission.instance)


async def run(redis_url: str, redis_down: bool, demand: Demand, steps: list[tuple]) -> None:
    client = aioredis.Redis.from_url(redis_url)
    health = RedisHealth(client, lambda: "counting in-process")
    prefix = f"wharf:test:{uuid.uuid4().hex}:limit:"
    limiter = Limiter(client, PipelinedRedis(redis_url, 2.0), health, prefix=prefix)
    if redis_down:
        health.failed(ConnectionError("the test's Redis outage"))
    held: dict[str, Admission] = {}
    try:
        for step in steps:
            action, name = step[0], step[1]
            if action == "admit":
                held[name] = await limiter.admit(demand)
                assert outcome(held[name]) == step[2], step
            elif action == "release":
                limiter.release(held[name], None)
            elif action == "reroute":
                assert await limiter.reroute(held[name], demand, step[2])
                assert outcome(held[name]) == step[3], step
            else:
                try:
                    await asyncio.wait_for(limiter.wait_for_slot(held[name], demand.workers), 0.4)
                    taken = True
                except TimeoutError:
                    taken = False
                assert taken == step[2], step
    finally:
        await limiter.stop()
        keys = [key async for key in client.scan_iter(prefix + "*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@pytest.mark.parametrize("redis_down", [False, True], ids=["redis", "in-process"])
@pytest.mark.parametrize("case", TABLE)
def test_admission_rules(redis_url: str, case: str, redis_down: bool) -> None:
    demand, steps = TABLE[case]
    asyncio.run(run(redis_url, redis_down, demand, steps))


@pytest.mark.parametrize(
    ("worker_threads", "max_queue_size", "bounds"),
    [
        (None, None, (0, 0)),  # no cap: the engine queues for itself
        (None, 10, (0, 10)),  # max_queue_size alone: outstanding per instance, as before
        (5, None, (5, 5 + 64)),  # EAS's default queue
        (2, 1, (2, 3)),
    ],
)
def test_instance_bounds(
    worker_threads: int | None, max_queue_size: int | None, bounds: tuple[int, int]
) -> None:
    assert instance_bounds(worker_threads, max_queue_size) == bounds
