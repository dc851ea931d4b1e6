"""EAS's admission settings in real gateway processes sharing one Redis, in front of a slow echo
engine that counts the requests it works on at once: metadata.rpc.worker_threads (at most that
many at an instance, the rest waiting in the gateway, EAS's 450 past max_queue_size, EAS's 408
past the keepalive) and networking.gateway_policy's concurrency and rate limits (429)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import redis
from gateway_support import (
    GatewayProcess,
    ServerThread,
    forget,
    isolated_settings,
    make_token,
    publish,
    service,
    snapshot,
    unique,
    wait_until,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from contracts.routing import RoutedInstance, RoutedService

pytestmark = pytest.mark.timeout(60)


class SlowEcho:
    """An engine that answers every request after `delay` seconds (the body's), counting the
    requests it holds at once."""

    def __init__(self) -> None:
        self.working = 0
        self.peak = 0
        routes = [Route(path, self.echo, methods=["POST"]) for path in ("/echo", "/v1/completions")]
        self.server = ServerThread(Starlette(routes=routes))

    async def echo(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.working += 1  # one event loop: no lock needed
        self.peak = max(self.peak, self.working)
        try:
            await asyncio.sleep(body["delay"])
        finally:
            self.working -= 1
        return JSONResponse({"echo": body})

    def reset(self) -> None:
        """Once the last test's requests are done (one cut off by its keepalive may still be
        sleeping here), count afresh."""
        assert wait_until(lambda: self.working == 0, 3)
        self.peak = 0


class Stack:
    """Two gateway processes (two replicas) and the engine, sharing routing and limits."""

    def __init__(self, redis_url: str) -> None:
        # A "second" of 30 s: the rate limit's window cannot slide mid-test.
        self.settings = isolated_settings(redis_url, second_s=30.0)
        self.redis_url = redis_url
        self.engine = SlowEcho()
        self.engine.server.start()
        self.gateways = [GatewayProcess(self.settings), GatewayProcess(self.settings)]
        self.token, self.digest = make_token()
        self.version = 0

    def deploy(self, **limits: Any) -> RoutedService:
        """A service on the engine with `limits`, routed by both gateways."""
        self.version += 1
        instance = RoutedInstance("echo-0", self.engine.server.url)
        svc = service(unique("svc"), [instance], [self.digest], models=("m",), **limits)
        publish(self.redis_url, self.settings, snapshot(self.version, svc))
        for gateway in self.gateways:
            assert wait_until(lambda g=gateway: self._routes(g.url), 5)
        self.engine.reset()
        return svc

    def _routes(self, url: str) -> bool:
        health = httpx.get(url + "/healthz", trust_env=False).json()
        return bool(health["snapshot_version"] == self.version)

    def call(
        self, svc: RoutedService, count: int, delay: float, openai: bool = False
    ) -> list[httpx.Response]:
        """`count` calls sent at once, alternating between the gateways: EAS's form, or
        OpenAI's."""
        barrier = threading.Barrier(count)
        path = "/v1/completions" if openai else f"/api/predict/{svc.name}/echo"
        body = {"model": "m", "prompt": "x", "delay": delay}

        def send(index: int) -> httpx.Response:
            url = self.gateways[index % 2].url + path
            with httpx.Client(timeout=20, trust_env=False) as client:
                barrier.wait()
                return client.post(url, json=body, headers={"Authorization": self.token})

        with ThreadPoolExecutor(count) as pool:
            return list(pool.map(send, range(count)))

    def held(self) -> int:
        """Leases held in Redis (service, instance queue and worker slots): 0 once every
        request has ended, however it ended."""
        with redis.Redis.from_url(self.redis_url) as client:
            keys = [k for k in client.scan_iter(self.settings.limits_prefix + "*")
                    if k.endswith((b":leases", b":workers"))]  # fmt: skip
            return sum(int(client.zcard(k)) for k in keys)

    def stop(self) -> None:
        for gateway in self.gateways:
            gateway.stop()
        self.engine.server.stop()
        forget(self.redis_url, self.settings)


@pytest.fixture(scope="module")
def stack(redis_url: str) -> Iterator[Stack]:
    started = Stack(redis_url)
    yield started
    started.stop()


def statuses(responses: list[httpx.Response]) -> list[int]:
    return sorted(r.status_code for r in responses)


def test_worker_threads_cap_an_instance_and_the_rest_wait_their_turn(stack: Stack) -> None:
    svc = stack.deploy(worker_threads=2)
    answers = stack.call(svc, 5, delay=0.4)
    assert statuses(answers) == [200] * 5, [a.text for a in answers]
    assert stack.engine.peak == 2


def test_past_the_queue_the_overflow_gets_eas_450(stack: Stack) -> None:
    svc = stack.deploy(worker_threads=2, max_queue_size=1)
    answers = stack.call(svc, 5, delay=1.0)
    assert statuses(answers) == [200] * 3 + [450] * 2
    refused = next(a for a in answers if a.status_code == 450)
    assert "metadata.rpc.worker_threads" in refused.json()["error"]["message"]
    assert stack.engine.peak == 2
    assert wait_until(lambda: stack.held() == 0)


def test_a_wait_past_the_keepalive_gets_eas_408(stack: Stack) -> None:
    svc = stack.deploy(worker_threads=1, timeout=0.6)
    answers = stack.call(svc, 2, delay=1.0)
    # The first is still at the engine when its keepalive ends; the second never reaches it.
    assert statuses(answers) == [408, 408]
    assert stack.engine.peak == 1
    assert wait_until(lambda: stack.held() == 0)


def test_the_gateway_policys_concurrency_limit_holds_across_gateways(stack: Stack) -> None:
    svc = stack.deploy(concurrency_limit=3)
    answers = stack.call(svc, 5, delay=1.0)
    assert statuses(answers) == [200] * 3 + [429] * 2
    refused = next(a for a in answers if a.status_code == 429)
    assert "gateway_policy.concurrency_limit" in refused.json()["error"]["message"]
    assert stack.engine.peak == 3


def test_the_service_rate_limit_holds_across_gateways(stack: Stack) -> None:
    svc = stack.deploy(rate_limit=5)
    answers = stack.call(svc, 8, delay=0.0)
    assert statuses(answers) == [200] * 5 + [429] * 3
    assert all(a.headers["retry-after"] for a in answers if a.status_code == 429)


def test_over_a_limit_the_openai_form_gets_openais_429(stack: Stack) -> None:
    svc = stack.deploy(worker_threads=1, max_queue_size=1)
    answers = stack.call(svc, 3, delay=1.0, openai=True)
    assert statuses(answers) == [200, 200, 429]
    refused = next(a for a in answers if a.status_code == 429)
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert int(refused.headers["retry-after-ms"]) > 0
