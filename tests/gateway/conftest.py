"""Fixtures for the gateway tests: engines and gateways served by uvicorn on loopback.

Every gateway gets its own snapshot key and channel in the shared test Redis, so tests
(and other suites using the same Redis) never see each other's routing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest
import redis
from gateway_support import (
    SECRET_KEY,
    Deployed,
    Engine,
    Gateway,
    ServerThread,
    make_token,
    service,
    snapshot,
)
from upstream_app import Recorder, create_upstream

from contracts.routing import Snapshot
from gateway.app import create_app
from gateway.config import Settings


@pytest.fixture(scope="session")
def engines() -> Iterator[list[Engine]]:
    """Two engine instances, shared by all tests (they keep no state a test depends on)."""
    started: list[tuple[Engine, ServerThread]] = []
    for name in ("engine-a", "engine-b"):
        recorder = Recorder()
        server = ServerThread(create_upstream(name, recorder)).start()
        started.append((Engine(name, server.url, recorder), server))
    yield [engine for engine, _ in started]
    for _, server in started:
        server.stop()


@pytest.fixture
def start_gateway(redis_url: str) -> Iterator[Callable[..., Gateway]]:
    """Starts gateways (settings overridable) on a fresh snapshot key; stops them afterwards."""
    servers: list[ServerThread] = []
    keys: list[tuple[str, str]] = []

    def start(
        initial: Snapshot | None = None,
        *,
        redis_url: str = redis_url,
        poll: float = 5.0,
        upstream_timeout: float = 10.0,
    ) -> Gateway:
        prefix = f"wharf:test:{uuid.uuid4().hex}"
        settings = Settings(
            redis_url=redis_url,
            secret_key=SECRET_KEY,
            snapshot_poll=poll,
            upstream_timeout=upstream_timeout,
            snapshot_key=f"{prefix}:snapshot",
            snapshot_channel=f"{prefix}:changed",
        )
        gateway = Gateway(url="", redis_url=redis_url, settings=settings)
        keys.append((redis_url, settings.snapshot_key))
        if initial is not None:
            gateway.publish(initial)
        server = ServerThread(create_app(settings)).start()
        servers.append(server)
        gateway.url = server.url
        return gateway

    yield start
    for server in servers:
        server.stop()
    for url, key in keys:
        try:
            with redis.Redis.from_url(url) as client:
                client.delete(key)
        except redis.RedisError:
            pass  # a Redis the test stopped on purpose


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10, trust_env=False) as client:
        yield client


@pytest.fixture
def deployed(start_gateway: Callable[..., Gateway], engines: list[Engine]) -> Deployed:
    token, digest = make_token()
    svc = service("tiny-svc", [engines[0].instance], [digest], models=("tiny", "tiny-alias"))
    return Deployed(start_gateway(snapshot(1, svc)), token, svc, engines[0])
