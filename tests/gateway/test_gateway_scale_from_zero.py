"""Scale from zero, the gateway's side (gateway.routing.activation): a request for a service whose
autoscaler may stop every instance is held until an instance is published, reported as held
for the autoscaler meanwhile, and then served; within a bound on how many, and for how long.

Each test has a Redis of its own, so the only in-flight report in it is its gateway's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import httpx
import pytest
import redis
from gateway_support import (
    Engine,
    Gateway,
    Gateways,
    RedisProcess,
    assert_error,
    make_token,
    metric,
    service,
    snapshot,
    unique,
    wait_until,
)

from contracts.inflight import read_reports
from contracts.routing import PdRouting, RoutedService

pytestmark = pytest.mark.timeout(60)


class Private:
    """A Redis of the test's own, with one gateway on it."""

    def __init__(self, redis_process: RedisProcess) -> None:
        self.redis_url = redis_process.url
        self.gateways = Gateways(redis_process.url)
        self.token, self.digest = make_token()
        self.gateway: Gateway | None = None
        self.version = 0

    def start(self, *services: RoutedService, **settings: Any) -> Gateway:
        self.version += 1
        self.gateway = self.gateways.start(snapshot(self.version, *services), **settings)
        return self.gateway

    def publish(self, *services: RoutedService) -> None:
        assert self.gateway is not None
        self.version += 1
        self.gateway.publish(snapshot(self.version, *services))

    def held(self) -> dict[str, int]:
        with redis.Redis.from_url(self.redis_url) as client:
            reports = read_reports(client)
        return reports[0].get("held", {}) if reports else {}

    def post(self, path: str, body: dict[str, Any], timeout: float = 30) -> httpx.Response:
        assert self.gateway is not None
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(timeout=timeout, trust_env=False) as client:
            return client.post(self.gateway.url + path, json=body, headers=headers)

    def metric(self, name: str, **labels: str) -> float:
        assert self.gateway is not None
        return metric(self.gateway.metrics(), name, **labels)


@pytest.fixture
def private(redis_process: RedisProcess) -> Iterator[Private]:
    redis_process.start()
    private = Private(redis_process)
    yield private
    private.gateways.stop_all()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(8)
    yield executor
    # Not waited for: a request a test left held ends when its gateway stops (`private`'s
    # teardown, next), not at its client's timeout 30 s on.
    executor.shutdown(wait=False, cancel_futures=True)


def idle(private: Private, **limits: Any) -> RoutedService:
    """A service scaled to zero: no instance, autoscaler min 0."""
    svc = service(unique("idle"), [], [private.digest], models=(unique("m"),), **limits)
    return replace(svc, scale_from_zero=True)


def completion(svc: RoutedService) -> dict[str, Any]:
    return {"model": svc.served_model_names[0], "prompt": "hello", "max_tokens": 2}


@pytest.mark.parametrize("form", ["openai", "eas"])
def test_held_request_is_served_once_an_instance_is_published(
    private: Private, engines: list[Engine], pool: ThreadPoolExecutor, form: str
) -> None:
    svc = idle(private)
    private.start(svc)
    path = "/v1/completions" if form == "openai" else f"/api/predict/{svc.name}/v1/completions"
    answer = pool.submit(private.post, path, completion(svc))
    # Held, and the autoscaler can see it in the gateway's report.
    assert wait_until(lambda: private.held() == {svc.name: 1}, 3)
    assert private.metric("wharf_gateway_held_requests", service=svc.name) == 1
    time.sleep(0.3)
    assert not answer.done()

    private.publish(replace(svc, instances=(engines[0].instance,)))
    response = answer.result(10)
    assert response.status_code == 200, response.text
    assert response.headers["x-wharf-instance"] == "engine-a"
    assert response.json()["choices"][0]["text"] == "engine-a-0 engine-a-1 "
    assert wait_until(lambda: private.held() == {}, 3)
    assert private.metric("wharf_gateway_held_requests", service=svc.name) == 0
    assert private.metric("wharf_gateway_activations_total", service=svc.name) == 1


def test_requests_beyond_the_services_queue_bound_get_503(
    private: Private, engines: list[Engine], pool: ThreadPoolExecutor
) -> None:
    svc = idle(private, max_queue_size=2)
    private.start(svc, activation_queue=10)
    held = [pool.submit(private.post, "/v1/completions", completion(svc)) for _ in range(2)]
    assert wait_until(lambda: private.held() == {svc.name: 2}, 3)

    refused = private.post("/v1/completions", completion(svc), timeout=5)
    assert_error(refused, 503, "server_error", "activation_queue_full")
    assert "max_queue_size" in refused.json()["error"]["message"]
    assert refused.headers["retry-after"] == "5"
    assert (
        private.metric(
            "wharf_gateway_rejections_total", service=svc.name, reason="activation_queue"
        )
        == 1
    )

    private.publish(replace(svc, instances=(engines[0].instance,)))
    assert [f.result(10).status_code for f in held] == [200, 200]


def test_the_gateways_queue_bound_applies_without_max_queue_size(
    private: Private, pool: ThreadPoolExecutor
) -> None:
    svc = idle(private)
    private.start(svc, activation_queue=1)
    held = pool.submit(private.post, "/v1/completions", completion(svc))
    assert wait_until(lambda: private.held() == {svc.name: 1}, 3)
    refused = private.post("/v1/completions", completion(svc), timeout=5)
    assert_error(refused, 503, "server_error", "activation_queue_full")
    assert "WHARF_GATEWAY_ACTIVATION_QUEUE" in refused.json()["error"]["message"]
    assert not held.done()


def test_a_held_request_gets_503_after_the_activation_timeout(private: Private) -> None:
    svc = idle(private)
    private.start(svc, activation_timeout=1.0)
    started = time.monotonic()
    response = private.post("/v1/completions", completion(svc))
    waited = time.monotonic() - started
    assert_error(response, 503, "server_error", "activation_timeout")
    assert response.headers["retry-after"] == "10"
    assert 0.9 <= waited < 5
    assert wait_until(lambda: private.held() == {}, 3)  # the report is written just after
    assert private.metric("wharf_gateway_activation_timeouts_total", service=svc.name) == 1


def test_the_services_keepalive_bounds_the_hold(private: Private) -> None:
    svc = idle(private, timeout=0.5)  # metadata.rpc.keepalive: 500 ms for the whole request
    private.start(svc, activation_timeout=30)
    started = time.monotonic()
    response = private.post(f"/api/predict/{svc.name}/v1/completions", completion(svc))
    assert_error(response, 503, "server_error", "activation_timeout")
    assert time.monotonic() - started < 3


def test_a_held_request_whose_client_leaves_is_dropped(
    private: Private, pool: ThreadPoolExecutor
) -> None:
    svc = idle(private)
    private.start(svc)
    answer = pool.submit(private.post, "/v1/completions", completion(svc), 2.0)
    assert wait_until(lambda: private.held() == {svc.name: 1}, 1.5)
    with pytest.raises(httpx.ReadTimeout):
        answer.result(10)
    # Gone from the count once the client left, long before the activation timeout.
    assert wait_until(lambda: private.held() == {}, 3)
    assert private.metric("wharf_gateway_held_requests", service=svc.name) == 0
    assert (
        private.metric("wharf_gateway_requests_total", service=svc.name, status="499", adapter="")
        == 1
    )


def test_a_service_without_scale_from_zero_gets_503_at_once(private: Private) -> None:
    svc = replace(idle(private), scale_from_zero=False)
    private.start(svc)
    for path in ("/v1/completions", f"/api/predict/{svc.name}/v1/completions"):
        started = time.monotonic()
        response = private.post(path, completion(svc))
        assert_error(response, 503, "server_error", "no_ready_instance")
        assert time.monotonic() - started < 1
    assert private.held() == {}


def test_a_held_request_of_a_removed_service_is_not_found(
    private: Private, pool: ThreadPoolExecutor
) -> None:
    svc = idle(private)
    private.start(svc)
    answer: Future[httpx.Response] = pool.submit(
        private.post, f"/api/predict/{svc.name}/v1/completions", completion(svc)
    )
    assert wait_until(lambda: private.held() == {svc.name: 1}, 3)
    private.publish()  # the service was deleted
    assert_error(answer.result(10), 404, "invalid_request_error", "service_not_found")


def test_a_prefill_decode_service_is_held_until_both_roles_have_an_instance(
    private: Private, engines: list[Engine], pool: ThreadPoolExecutor
) -> None:
    prefill = replace(engines[0].instance, role="prefill")
    decode = replace(engines[1].instance, role="decode")
    svc = replace(idle(private), pd=PdRouting("ExampleConnector"))
    private.start(svc)
    answer = pool.submit(private.post, "/v1/completions", completion(svc))
    assert wait_until(lambda: private.held() == {svc.name: 1}, 3)
    private.publish(replace(svc, instances=(decode,)))  # decode first: still held
    time.sleep(0.5)
    assert not answer.done() and private.held() == {svc.name: 1}
    private.publish(replace(svc, instances=(prefill, decode)))
    response = answer.result(10)
    assert response.status_code == 200, response.text
    assert response.headers["x-wharf-instance"] == "engine-b"
