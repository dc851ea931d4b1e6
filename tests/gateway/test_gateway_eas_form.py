"""The EAS form (/api/predict/<service>/...) as PAI-EAS callers expect it: 450 for a full
instance queue, 408 past the service's keepalive, HEAD/204/304 answered without hanging; and
whatever ends a request, its instance and queue slot are given back."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from gateway_support import (
    Engine,
    Gateway,
    assert_error,
    make_token,
    service,
    snapshot,
    unique,
    wait_until,
)

from contracts.routing import RoutedInstance

pytestmark = pytest.mark.timeout(60)


def released(gateway: Gateway, url: str) -> bool:
    """Nothing held at the instance: neither the balancer's count nor a queue lease."""
    return wait_until(lambda: gateway.in_flight(url) == 0 and gateway.queue_leases(url) == 0)


def predict(
    http: httpx.Client, gateway: Gateway, name: str, token: str, body: dict, path: str = ""
) -> httpx.Response:
    return http.post(
        f"{gateway.url}/api/predict/{name}{path or '/v1/completions'}",
        json=body,
        headers={"Authorization": token},
    )


def test_a_head_through_the_eas_form_is_answered_at_once_and_releases_its_instance(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    name, engine = unique("svc"), engines[0]
    gateway = start_gateway(snapshot(1, service(name, [engine.instance], [digest])))
    started = time.monotonic()
    # The gateway's upstream timeout is 10 s: a HEAD waiting for a body would take that long.
    answer = http.head(f"{gateway.url}/api/predict/{name}/health", headers={"Authorization": token})
    assert answer.status_code == 200 and answer.content == b""
    assert answer.headers["content-length"] == str(len(b'{"status":"ok"}'))
    assert time.monotonic() - started < 2
    assert released(gateway, engine.url)
    # The connection the HEAD used serves the next call.
    assert predict(http, gateway, name, token, {"prompt": "x"}).status_code == 200


@pytest.mark.parametrize("status", [204, 304])
def test_204_and_304_answers_are_relayed_without_a_body(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client, status: int
) -> None:
    token, digest = make_token()
    name, engine = unique("svc"), engines[0]
    gateway = start_gateway(snapshot(1, service(name, [engine.instance], [digest])))
    url = f"{gateway.url}/api/predict/{name}/status/{status}"
    answer = http.get(url, headers={"Authorization": token})
    assert (answer.status_code, answer.content, answer.headers["etag"]) == (status, b"", '"v1"')
    assert released(gateway, engine.url)


class EngineAnswering:
    """An engine that answers every request on a connection with the same bytes, as written:
    framings a well-behaved server would not make (a 304 naming a length)."""

    def __init__(self, answer: bytes) -> None:
        self._answer = answer
        self._loop = asyncio.new_event_loop()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> EngineAnswering:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, sock=self._sock), self._loop
        ).result(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(self._answer)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def test_a_304_naming_a_length_is_relayed_without_it(
    start_gateway: Callable[..., Gateway], http: httpx.Client
) -> None:
    # RFC 9110 lets a 304 carry the Content-Length of the representation it stands for.
    token, digest = make_token()
    name = unique("svc")
    answer_bytes = b'HTTP/1.1 304 Not Modified\r\netag: "v1"\r\ncontent-length: 42\r\n\r\n'
    with EngineAnswering(answer_bytes) as engine:
        instance = RoutedInstance(name="raw-engine", url=engine.url)
        gateway = start_gateway(snapshot(1, service(name, [instance], [digest])))
        answer = http.get(f"{gateway.url}/api/predict/{name}/x", headers={"Authorization": token})
        assert (answer.status_code, answer.content) == (304, b"")
        assert "content-length" not in answer.headers
        assert released(gateway, engine.url)


def test_a_full_instance_queue_is_450_in_eas_form_and_429_in_openai_form(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    name, engine = unique("svc"), engines[0]
    svc = service(name, [engine.instance], [digest], max_queue_size=1)
    gateway = start_gateway(snapshot(1, svc))
    with ThreadPoolExecutor(1) as pool:
        # One slow request fills the instance's queue of one.
        held = pool.submit(predict, http, gateway, name, token, {"prompt": "x", "delay": 1.0})
        assert wait_until(lambda: gateway.queue_leases(engine.url) == 1)
        eas = predict(httpx.Client(trust_env=False), gateway, name, token, {"prompt": "y"})
        openai_form = httpx.post(
            gateway.url + "/v1/completions",
            json={"model": name, "prompt": "y"},
            headers={"Authorization": f"Bearer {token}"},
            trust_env=False,
        )
        assert held.result(10).status_code == 200
    assert_error(eas, 450, "requests", "rate_limit_exceeded")
    assert "queue limit of 1" in eas.json()["error"]["message"] and eas.headers["retry-after"]
    assert_error(openai_form, 429, "requests", "rate_limit_exceeded")
    assert released(gateway, engine.url)
    assert predict(http, gateway, name, token, {"prompt": "z"}).status_code == 200


def test_a_request_past_the_keepalive_is_408_in_eas_form_and_the_engine_stops(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    name, engine = unique("svc"), engines[0]
    # metadata.rpc.keepalive: 300 ms; the gateway's silence timeout (30 s) plays no part.
    svc = service(name, [engine.instance], [digest], timeout=0.3, max_queue_size=4)
    gateway = start_gateway(snapshot(1, svc), upstream_timeout=30)
    test_id = unique("t")
    started = time.monotonic()
    answer = http.post(
        f"{gateway.url}/api/predict/{name}/v1/completions",
        json={"prompt": "x", "delay": 5},
        headers={"Authorization": token, "x-test-id": test_id},
    )
    assert 0.25 < time.monotonic() - started < 2
    assert_error(answer, 408, "server_error", "request_timeout")
    assert "300 ms" in answer.json()["error"]["message"]
    assert answer.headers["connection"] == "close"  # EAS closes the connection too
    assert wait_until(lambda: engine.recorder.seen[test_id].aborted)
    assert released(gateway, engine.url)


def test_the_keepalive_cuts_a_stream_that_outlasts_it(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    token, digest = make_token()
    name, engine = unique("svc"), engines[0]
    svc = service(name, [engine.instance], [digest], timeout=0.5)
    gateway = start_gateway(snapshot(1, svc), upstream_timeout=30)
    body = {"prompt": "x", "stream": True, "max_tokens": 50, "chunk_delay": 0.1}
    started = time.monotonic()
    with (
        httpx.Client(trust_env=False, timeout=10) as client,
        pytest.raises(httpx.RemoteProtocolError),
        client.stream(
            "POST",
            f"{gateway.url}/api/predict/{name}/v1/completions",
            json=body,
            headers={"Authorization": token},
        ) as answer,
    ):
        assert answer.status_code == 200
        for _ in answer.iter_bytes():
            pass
    assert time.monotonic() - started < 3  # 50 tokens would take 5 s
    assert released(gateway, engine.url)


@pytest.fixture
def slow_engine_gateway(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> Iterator[tuple[Gateway, str, str]]:
    token, digest = make_token()
    name = unique("svc")
    yield start_gateway(snapshot(1, service(name, [engines[0].instance], [digest]))), name, token


def test_a_service_without_keepalive_has_no_deadline(
    slow_engine_gateway: tuple[Gateway, str, str], http: httpx.Client
) -> None:
    gateway, name, token = slow_engine_gateway
    answer = predict(http, gateway, name, token, {"prompt": "x", "delay": 0.6})
    assert answer.status_code == 200
