"""What an engine can make the gateway hold is capped: an endless streamed event cuts that one
stream (its error event names the cap) while the gateway's memory stays flat and another
service through the same gateway process keeps its latency; a prefill leg's answer past its
cap fails the prefill leg."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace

import httpx
import pytest
from gateway_support import (
    Engine,
    Gateway,
    GatewayProcess,
    RawEngineThread,
    assert_error,
    forget,
    isolated_settings,
    make_token,
    metric,
    publish,
    service,
    snapshot,
    unique,
    wait_until,
)
from raw_engine import read_request

from contracts.routing import PdRouting, RoutedInstance, RoutedService
from gateway.config import MAX_SSE_EVENT_BYTES

pytestmark = pytest.mark.timeout(120)

MIB = 1 << 20
_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def endless_event(frame: int, total: int, pause: float) -> Callable[..., object]:
    """An engine streaming one event that does not end: `total` bytes in `frame`-byte chunks
    (`pause` s apart), and only then the blank line that would end it."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(_STREAM_HEAD + _chunk(b"data: "))
        payload = _chunk(b"x" * frame)
        for _ in range(total // frame):
            writer.write(payload)
            await writer.drain()  # raises once the gateway has closed the connection
            if pause:
                await asyncio.sleep(pause)
        writer.write(_chunk(b"\n\ndata: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()

    return handler


def stream_through(url: str, token: str, path: str, body: dict) -> tuple[int, bytes, bool]:
    """(bytes received, their last 4 KiB, whether the stream was cut rather than ended)."""
    received, tail, cut = 0, b"", False
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=60, trust_env=False) as client:
        try:
            with client.stream("POST", url + path, json=body, headers=headers) as answer:
                assert answer.status_code == 200
                for part in answer.iter_raw():
                    received += len(part)
                    tail = (tail + part)[-4096:]
        except httpx.RemoteProtocolError:
            cut = True
    return received, tail, cut


def latency(client: httpx.Client, url: str, token: str, model: str) -> float:
    started = time.perf_counter()
    answer = client.post(
        url + "/v1/completions",
        json={"model": model, "prompt": "hi", "max_tokens": 2},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 200, answer.text
    return time.perf_counter() - started


@pytest.fixture
def gateway_process(redis_url: str) -> Iterator[GatewayProcess]:
    """A gateway in its own process (so its memory is its own), with the default caps."""
    settings = isolated_settings(redis_url)
    assert settings.max_sse_event_bytes == MAX_SSE_EVENT_BYTES == MIB
    process = GatewayProcess(settings)
    yield process
    process.stop()
    forget(redis_url, settings)


@pytest.mark.parametrize(
    ("frame", "total", "pause", "path"),
    [
        (1024, 8 * MIB, 0.0002, "/v1/completions"),
        (256 * 1024, 96 * MIB, 0.0, "/api/predict/{service}/v1/completions"),
    ],
    ids=["1KiB-frames-openai-form", "256KiB-frames-eas-form"],
)
def test_an_endless_event_cuts_its_stream_and_slows_no_other_service(
    redis_url: str,
    gateway_process: GatewayProcess,
    engines: list[Engine],
    frame: int,
    total: int,
    pause: float,
    path: str,
) -> None:
    token, digest = make_token()
    with RawEngineThread(endless_event(frame, total, pause)) as raw:
        endless = service(unique("endless"), [RoutedInstance("raw", raw.url)], [digest])
        steady = service(unique("steady"), [engines[0].instance], [digest])
        publish(redis_url, gateway_process.settings, snapshot(1, endless, steady))
        url = gateway_process.url
        with httpx.Client(timeout=10, trust_env=False) as client:
            assert wait_until(lambda: client.get(url + "/readyz").status_code == 200, 5)
            before = sorted(latency(client, url, token, steady.name) for _ in range(15))
            memory_before = gateway_process.peak_memory()
            # The EAS-form caller asked for usage itself: its stream is copied, not cut into.
            body = {"model": endless.name, "prompt": "x", "stream": True}
            if path.startswith("/api"):
                body["stream_options"] = {"include_usage": True}
            results: list[tuple[int, bytes, bool]] = []

            def keep_streaming() -> None:
                for _ in range(3):
                    target = path.format(service=endless.name)
                    results.append(stream_through(url, token, target, body))

            streamer = threading.Thread(target=keep_streaming)
            streamer.start()
            during = []
            while streamer.is_alive() or len(during) < 15:
                during.append(latency(client, url, token, steady.name))
            streamer.join()
    assert len(results) == 3
    for received, tail, cut in results:
        assert cut, "the stream must be cut, not ended as if complete"
        assert b'"code": "upstream_event_too_large"' in tail
        assert received < 4 * MIB  # the gateway stopped at the cap, not at the engine's end
    assert gateway_process.peak_memory() - memory_before < 32 * MIB
    assert max(during) < 1.0
    assert statistics.median(during) < statistics.median(before) + 0.05


def _endless_json_answer(size: int) -> Callable[..., object]:
    """A prefill engine answering a 200 whose JSON body is `size` bytes long."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        writer.write(head + b"transfer-encoding: chunked\r\n\r\n" + _chunk(b'{"pad": "'))
        payload = _chunk(b"x" * (64 * 1024))
        for _ in range(size // (64 * 1024)):
            writer.write(payload)
            await writer.drain()
        writer.write(_chunk(b'", "choices": [{"text": "!"}]}') + b"0\r\n\r\n")
        await writer.drain()

    return handler


def _pd_service(prefill_url: str, decode: Engine, digest: str, **pd: str) -> RoutedService:
    prefill = RoutedInstance("raw-prefill", prefill_url, role="prefill")
    svc = service(unique("pd"), [prefill, replace(decode.instance, role="decode")], [digest])
    return replace(svc, served_model_names=("m",), pd=PdRouting("ExampleConnector", **pd))


@pytest.mark.parametrize("fallback", ["fail", "decode_only"])
def test_a_prefill_answer_past_its_cap_fails_the_prefill_leg(
    start_gateway: Callable[..., Gateway], engines: list[Engine], fallback: str
) -> None:
    token, digest = make_token()
    with RawEngineThread(_endless_json_answer(32 * MIB)) as raw:
        svc = _pd_service(raw.url, engines[1], digest, on_prefill_failure=fallback)
        gateway = start_gateway(snapshot(1, svc), max_prefill_answer_bytes=MIB)
        test_id = uuid.uuid4().hex
        started = time.monotonic()
        answer = httpx.post(
            gateway.url + "/v1/completions",
            json={"model": "m", "prompt": "hello", "max_tokens": 3},
            headers={"Authorization": f"Bearer {token}", "x-test-id": test_id},
            timeout=30,
            trust_env=False,
        )
        assert time.monotonic() - started < 5  # refused at the cap, not after 32 MiB
    if fallback == "fail":
        assert_error(answer, 502, "server_error", "prefill_answer_too_large")
        assert str(MIB) in answer.json()["error"]["message"]
        assert test_id not in engines[1].recorder.seen
    else:
        assert answer.status_code == 200 and answer.headers["x-wharf-instance"] == "engine-b"
    failures = metric(gateway.metrics(), "wharf_gateway_upstream_errors_total", service=svc.name,
                      kind="too_large")  # fmt: skip
    assert failures == 1
