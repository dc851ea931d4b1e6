"""Limits shared by separate gateway processes through one Redis: exact, and crash-safe."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from gateway_support import (
    Engine,
    Gateway,
    GatewayProcess,
    forget,
    isolated_settings,
    make_key,
    publish,
    service,
    snapshot,
    unique,
    wait_until,
)

from contracts.routing import RoutedKey, RoutedService, Snapshot
from gateway.config import Settings

pytestmark = pytest.mark.timeout(60)


class Pair:
    """Two gateway processes sharing routing and limits, as two replicas would."""

    def __init__(self, redis_url: str, settings: Settings) -> None:
        self.redis_url = redis_url
        self.settings = settings
        self.processes = [GatewayProcess(settings), GatewayProcess(settings)]
        self.version = 0

    def publish(self, *services: RoutedService, keys: dict[str, RoutedKey]) -> None:
        """Publishes and waits until both processes route the first service."""
        self.version += 1
        routing: Snapshot = snapshot(self.version, *services, keys=keys)
        publish(self.redis_url, self.settings, routing)

        def loaded(process: GatewayProcess) -> bool:
            health = httpx.get(process.url + "/healthz", trust_env=False).json()
            return bool(health["snapshot_version"] == self.version)

        assert all(wait_until(lambda p=p: loaded(p), 5) for p in self.processes)


@pytest.fixture(scope="module")
def pair(redis_url: str) -> Iterator[Pair]:
    # A "second" of 30 s: the service rate limit's window cannot slide mid-test.
    settings = isolated_settings(redis_url, second_s=30.0)
    started = Pair(redis_url, settings)
    yield started
    for process in started.processes:
        process.stop()
    forget(redis_url, settings)


def fire(urls: list[str], token: str, bodies: list[dict[str, Any]]) -> list[int]:
    """Sends every body at once, alternating between the gateways; the statuses, in order."""
    barrier = threading.Barrier(len(bodies))

    def send(index: int) -> int:
        with httpx.Client(timeout=20, trust_env=False) as client:
            barrier.wait()
            response = client.post(
                urls[index % len(urls)] + "/v1/completions",
                json=bodies[index],
                headers={"Authorization": f"Bearer {token}"},
            )
            return response.status_code

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(send, range(len(bodies))))


LIMIT_KINDS = {
    # kind: (service limits, key limits, engine delay: long enough to overlap all requests)
    "service_rps": ({"rate_limit": 12}, {}, 0.0),
    "key_rpm": ({}, {"rpm": 12}, 0.0),
    # Each estimated at 20 tokens (below); they overlap, so no real usage corrects them yet.
    "key_tpm": ({}, {"tpm": 12 * 20}, 1.0),
    "key_concurrency": ({}, {"max_concurrency": 12}, 1.0),
    "instance_queue": ({"max_queue_size": 12}, {}, 1.0),
}


@pytest.mark.parametrize("kind", LIMIT_KINDS)
def test_two_gateways_admit_exactly_the_limit_between_them(
    pair: Pair, engines: list[Engine], kind: str
) -> None:
    service_limits, key_limits, delay = LIMIT_KINDS[kind]
    token, digest = make_key()
    svc = service(unique("svc"), [engines[0].instance], [], models=("m",), **service_limits)
    pair.publish(svc, keys={digest: RoutedKey(unique("k"), **key_limits)})
    body = {"model": "m", "prompt": "x", "max_tokens": 1, "delay": delay}
    # Padding brings the body to 76 bytes: 19 estimated prompt tokens + 1 = 20 a request.
    body["pad"] = ""
    body["pad"] = "p" * (76 - len(httpx.Request("POST", "/", json=body).content))
    assert len(httpx.Request("POST", "/", json=body).content) == 76

    statuses = fire([p.url for p in pair.processes], token, [body] * 40)
    assert statuses.count(200) == 12, statuses
    assert statuses.count(429) == 28


def test_slot_of_a_crashed_gateway_frees_itself_after_the_lease_ttl(
    redis_url: str, start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    settings = isolated_settings(redis_url, lease_ttl=0.6)
    token, digest = make_key()
    svc = service(unique("svc"), [engines[0].instance], [], models=("m",))
    routing = snapshot(1, svc, keys={digest: RoutedKey(unique("k"), max_concurrency=1)})
    publish(redis_url, settings, routing)
    doomed = GatewayProcess(settings)
    survivor = start_gateway(
        routing,
        snapshot_key=settings.snapshot_key,
        snapshot_channel=settings.snapshot_channel,
        limits_prefix=settings.limits_prefix,
    )
    headers = {"Authorization": f"Bearer {token}"}
    body = {"model": "m", "prompt": "x", "max_tokens": 1}

    def admitted() -> bool:
        response = httpx.post(
            survivor.url + "/v1/completions", json=body, headers=headers, trust_env=False
        )
        return response.status_code == 200

    try:
        with httpx.stream(
            "POST",
            doomed.url + "/v1/completions",
            json={**body, "stream": True, "max_tokens": 100, "chunk_delay": 0.05},
            headers=headers,
            trust_env=False,
        ) as stream:
            chunks = stream.iter_raw()
            next(chunks)
            time.sleep(1.0)  # past the TTL: only renewals keep the slot held
            assert not admitted()
            doomed.kill()
            crashed = time.monotonic()
            assert not admitted()
            assert wait_until(admitted, 3.0)
            assert time.monotonic() - crashed < 1.5
    finally:
        doomed.stop()
