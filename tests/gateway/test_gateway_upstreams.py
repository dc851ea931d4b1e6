"""Choosing among instances, and answering for instances that fail."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import httpx
import pytest
from gateway_support import (
    Engine,
    Gateway,
    assert_error,
    free_port_refusing_connections,
    make_token,
    metric,
    service,
    snapshot,
)

from contracts.routing import RoutedInstance

pytestmark = pytest.mark.timeout(30)


def complete(http: httpx.Client, gateway: Gateway, token: str, **extra: object) -> httpx.Response:
    return http.post(
        gateway.url + "/v1/completions",
        json={"model": "svc", "prompt": "x", **extra},
        headers={"Authorization": f"Bearer {token}"},
    )


def test_spreads_requests_evenly_across_idle_instances(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    instances = [e.instance for e in engines]
    gateway = start_gateway(snapshot(1, service("svc", instances, [digest])))
    served = Counter(complete(http, gateway, token).headers["x-wharf-instance"] for _ in range(10))
    assert served == {"engine-a": 5, "engine-b": 5}


def test_sends_new_requests_to_the_instance_with_fewer_in_flight(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    gateway = start_gateway(snapshot(1, service("svc", [e.instance for e in engines], [digest])))
    body = {"model": "svc", "prompt": "x", "stream": True, "max_tokens": 20, "chunk_delay": 0.05}
    with http.stream(
        "POST",
        gateway.url + "/v1/completions",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
    ) as busy:
        # Kept referenced: a discarded, half-read iterator closes the connection.
        chunks = busy.iter_raw()
        next(chunks)
        busy_instance = busy.headers["x-wharf-instance"]
        served = {complete(http, gateway, token).headers["x-wharf-instance"] for _ in range(4)}
        next(chunks)  # still streaming: it was in flight all along
    assert served == {"engine-a", "engine-b"} - {busy_instance}


def test_only_instance_refusing_connections_is_502(
    start_gateway: Callable[..., Gateway], http: httpx.Client
) -> None:
    token, digest = make_token()
    dead = RoutedInstance("dead", free_port_refusing_connections())
    gateway = start_gateway(snapshot(1, service("svc", [dead], [digest])))
    response = complete(http, gateway, token)
    assert response.status_code == 502
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "upstream_unreachable")


def test_retries_another_instance_when_one_refuses_connections(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    dead = RoutedInstance("dead", free_port_refusing_connections())
    gateway = start_gateway(snapshot(1, service("svc", [dead, engines[1].instance], [digest])))
    # Whichever the rotation tries first, every request ends up served by the live instance.
    for _ in range(4):
        response = complete(http, gateway, token)
        assert response.status_code == 200
        assert response.headers["x-wharf-instance"] == "engine-b"


def test_instance_refusing_connections_sits_out_a_cool_down(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    dead = RoutedInstance("dead", free_port_refusing_connections())
    gateway = start_gateway(
        snapshot(1, service("svc", [dead, engines[1].instance], [digest])), cooldown=0.5
    )

    def connect_errors() -> float:
        errors = "wharf_gateway_upstream_errors_total"
        return metric(gateway.metrics(), errors, service="svc", kind="connect")

    # Tried once, then passed over: rotation alone would try it for every other request.
    for _ in range(6):
        assert complete(http, gateway, token).headers["x-wharf-instance"] == "engine-b"
    assert connect_errors() == 1
    time.sleep(0.6)  # cooled down: it gets another chance
    for _ in range(2):
        assert complete(http, gateway, token).status_code == 200
    assert connect_errors() == 2


def test_service_keepalive_answers_504_in_openai_form_and_cools_nothing_down(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    slow = service("svc", [engines[0].instance, engines[1].instance], [digest], timeout=0.3)
    gateway = start_gateway(snapshot(1, slow), upstream_timeout=30)
    response = complete(http, gateway, token, delay=2)
    assert_error(response, 504, "server_error", "upstream_timeout")
    assert "within 0.3 s" in response.json()["error"]["message"]
    # The request took too long, not its instance: both keep serving.
    served = {complete(http, gateway, token).headers["x-wharf-instance"] for _ in range(4)}
    assert served == {"engine-a", "engine-b"}


def test_server_error_is_passed_on_and_its_instance_cools_down(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    gateway = start_gateway(snapshot(1, service("svc", [e.instance for e in engines], [digest])))
    headers = {"Authorization": token}
    failed = http.post(gateway.url + "/api/predict/svc/echo/x?status=503", headers=headers)
    assert failed.status_code == 503  # the engine's own answer, not retried elsewhere
    broken = failed.json()["instance"]
    served = {
        http.post(gateway.url + "/api/predict/svc/echo/x", headers=headers).json()["instance"]
        for _ in range(4)
    }
    assert served == {"engine-a", "engine-b"} - {broken}
    errors = metric(
        gateway.metrics(), "wharf_gateway_upstream_errors_total", service="svc", kind="http_5xx"
    )
    assert errors == 1


def test_instance_slower_than_upstream_timeout_is_504(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    gateway = start_gateway(
        snapshot(1, service("svc", [engines[0].instance], [digest])), upstream_timeout=0.3
    )
    response = complete(http, gateway, token, delay=2)
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"
    assert metric(
        gateway.metrics(), "wharf_gateway_upstream_errors_total", service="svc", kind="timeout"
    )
    # A stream that keeps producing within the timeout is not cut, however long it lasts.
    streamed = complete(http, gateway, token, stream=True, max_tokens=5, chunk_delay=0.15)
    assert streamed.status_code == 200
    assert streamed.text.endswith("data: [DONE]\n\n")


def test_concurrent_requests_all_complete(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    token, digest = make_token()
    gateway = start_gateway(snapshot(1, service("svc", [e.instance for e in engines], [digest])))
    results: list[int] = []

    def call() -> None:
        with httpx.Client(timeout=10, trust_env=False) as client:
            body = {"stream": True, "max_tokens": 5, "chunk_delay": 0.05}
            results.append(complete(client, gateway, token, **body).status_code)

    threads = [threading.Thread(target=call) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [200] * 20
