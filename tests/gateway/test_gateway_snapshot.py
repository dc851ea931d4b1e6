"""Routing changes reach a running gateway through Redis, and Redis outages do not stop it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import httpx
import pytest
import redis
from gateway_support import (
    Deployed,
    Engine,
    Gateway,
    RedisProcess,
    make_token,
    service,
    snapshot,
)

pytestmark = pytest.mark.timeout(30)


def complete(http: httpx.Client, gateway: Gateway, token: str, model: str) -> httpx.Response:
    return http.post(
        gateway.url + "/v1/completions",
        json={"model": model, "prompt": "x"},
        headers={"Authorization": f"Bearer {token}"},
    )


def seconds_until(condition: Callable[[], bool], limit: float) -> float:
    """How long `condition` took to hold; fails the test after `limit` seconds."""
    start = time.monotonic()
    while not condition():
        elapsed = time.monotonic() - start
        assert elapsed < limit, f"condition still false after {limit} s"
        time.sleep(0.02)
    return time.monotonic() - start


def version(http: httpx.Client, gateway: Gateway) -> int:
    return http.get(gateway.url + "/healthz").json()["snapshot_version"]


def test_serves_newly_published_service_within_a_second(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    first = service("first", [engines[0].instance], [digest])
    # Polling every 60 s: only the pub/sub message can explain a prompt reload.
    gateway = start_gateway(snapshot(1, first), poll=60)
    assert complete(http, gateway, token, "second").status_code == 404

    gateway.publish(snapshot(2, first, service("second", [engines[1].instance], [digest])))
    seconds_until(lambda: complete(http, gateway, token, "second").status_code == 200, 1.0)
    assert version(http, gateway) == 2


def test_revoked_token_is_refused_once_published(
    own_deployment: Deployed, http: httpx.Client
) -> None:
    deployed = own_deployment
    assert complete(http, deployed.gateway, deployed.token, "tiny").status_code == 200
    _, other_digest = make_token()
    revoked = service("tiny-svc", [deployed.engine.instance], [other_digest], models=("tiny",))
    deployed.gateway.publish(snapshot(2, revoked))

    def refused() -> bool:
        return complete(http, deployed.gateway, deployed.token, "tiny").status_code == 401

    seconds_until(refused, 1.0)


def test_ignores_malformed_snapshot_and_keeps_the_last_good_one(
    own_deployment: Deployed, http: httpx.Client
) -> None:
    deployed = own_deployment
    settings = deployed.gateway.settings
    with redis.Redis.from_url(deployed.gateway.redis_url) as client:
        client.set(settings.snapshot_key, "{not json")
        client.publish(settings.snapshot_channel, 2)
    time.sleep(0.2)
    assert complete(http, deployed.gateway, deployed.token, "tiny").status_code == 200
    assert version(http, deployed.gateway) == 1


def test_keeps_serving_last_snapshot_while_redis_is_down(
    start_gateway: Callable[..., Gateway],
    engines: list[Engine],
    http: httpx.Client,
    redis_process: RedisProcess,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    redis_process.start()
    token, digest = make_token()
    svc = service("svc", [engines[0].instance], [digest])
    gateway = start_gateway(snapshot(1, svc), redis_url=redis_process.url, poll=0.1)
    assert complete(http, gateway, token, "svc").status_code == 200

    redis_process.stop()
    time.sleep(0.6)  # several polls and reconnection attempts against a dead Redis
    assert complete(http, gateway, token, "svc").status_code == 200
    assert version(http, gateway) == 1
    outage = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(outage) == 1, "the outage should be reported once, not once per attempt"
    assert "serving the last routing snapshot" in outage[0].getMessage()

    # Back, but empty (no persistence): the old routes stay until the control plane republishes.
    redis_process.start()
    seconds_until(lambda: "Redis reachable again" in caplog.text, 2.0)
    assert complete(http, gateway, token, "svc").status_code == 200
    gateway.publish(snapshot(2, svc, service("new", [engines[1].instance], [digest])))
    seconds_until(lambda: complete(http, gateway, token, "new").status_code == 200, 1.0)


def test_answers_503_until_routing_is_first_loaded(
    start_gateway: Callable[..., Gateway],
    engines: list[Engine],
    http: httpx.Client,
    redis_process: RedisProcess,
) -> None:
    token, digest = make_token()
    gateway = start_gateway(redis_url=redis_process.url, poll=0.1)  # Redis not started yet
    response = complete(http, gateway, token, "svc")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "routing_unavailable"
    assert http.get(gateway.url + "/healthz").status_code == 200

    redis_process.start()
    gateway.publish(snapshot(1, service("svc", [engines[0].instance], [digest])))
    seconds_until(lambda: complete(http, gateway, token, "svc").status_code == 200, 2.0)
