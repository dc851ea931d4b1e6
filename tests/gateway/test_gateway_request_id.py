"""x-request-id through a real gateway: made or kept, sent to the engine, returned, logged."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from gateway_support import (
    Deployed,
    Engine,
    Gateway,
    ServerThread,
    free_port_refusing_connections,
    make_token,
    service,
    snapshot,
    unique,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from contracts.log_format import TextFormatter
from contracts.routing import PdRouting, RoutedInstance

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
NEW_ID = re.compile(r"[0-9a-f]{32}")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def completion(gateway: Gateway, token: str, headers: dict, **body) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/completions",
        json={"model": "tiny", "prompt": "hello", "max_tokens": 2, **body},
        headers={"Authorization": f"Bearer {token}", **headers},
        timeout=10,
        trust_env=False,
    )


def test_a_new_id_reaches_the_engine_and_comes_back(deployed: Deployed) -> None:
    test_id = uuid.uuid4().hex
    answer = completion(deployed.gateway, deployed.token, {"x-test-id": test_id})
    assert answer.status_code == 200
    request_id = answer.headers["x-request-id"]
    assert NEW_ID.fullmatch(request_id)
    assert deployed.engine.recorder.seen[test_id].headers["x-request-id"] == request_id


def test_each_request_gets_its_own_id(deployed: Deployed) -> None:
    ids = {completion(deployed.gateway, deployed.token, {}).headers["x-request-id"] for _ in "ab"}
    assert len(ids) == 2


def test_a_callers_id_is_kept_on_a_stream(deployed: Deployed) -> None:
    test_id = uuid.uuid4().hex
    headers = {"x-test-id": test_id, "X-Request-Id": "trace-42/step:7"}
    answer = completion(deployed.gateway, deployed.token, headers, stream=True)
    assert answer.status_code == 200 and "data: [DONE]" in answer.text
    assert answer.headers.get_list("x-request-id") == ["trace-42/step:7"]
    assert deployed.engine.recorder.seen[test_id].headers["x-request-id"] == "trace-42/step:7"


def test_the_eas_form_sends_the_id_once(deployed: Deployed, http: httpx.Client) -> None:
    answer = http.post(
        deployed.gateway.url + "/api/predict/tiny-svc/echo/v1/x",
        content=b"{}",
        headers={"Authorization": deployed.token, "x-request-id": "eas-1"},
    )
    assert answer.status_code == 200
    assert answer.json()["headers"]["x-request-id"] == "eas-1"
    assert answer.headers.get_list("x-request-id") == ["eas-1"]


@pytest.mark.parametrize(
    "bad",
    [b"x" * 129, b"has space", b"caf\xc3\xa9", b"tab\there"],
    ids=["too-long", "space", "non-ascii", "control"],
)
def test_a_bad_id_is_replaced(deployed: Deployed, bad: bytes) -> None:
    test_id = uuid.uuid4().hex
    answer = completion(deployed.gateway, deployed.token, {"x-test-id": test_id,
                                                           "x-request-id": bad})  # fmt: skip
    assert answer.status_code == 200
    request_id = answer.headers["x-request-id"]
    assert NEW_ID.fullmatch(request_id)
    assert deployed.engine.recorder.seen[test_id].headers["x-request-id"] == request_id


def test_a_128_character_id_is_kept(deployed: Deployed) -> None:
    longest = "k" * 128
    answer = completion(deployed.gateway, deployed.token, {"x-request-id": longest})
    assert answer.headers["x-request-id"] == longest


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "token"),
    [
        ("POST", "/v1/completions", {"model": "tiny", "prompt": "x"}, 401, False),
        ("POST", "/v1/completions", {"model": "nobody", "prompt": "x"}, 404, True),
        ("POST", "/api/predict/nobody/v1/completions", {}, 404, False),
        ("GET", "/no/such/route", None, 404, False),
        ("POST", "/v1/completions", {"prompt": "x"}, 400, True),
    ],
)
def test_gateway_made_errors_carry_the_id(
    deployed: Deployed,
    http: httpx.Client,
    method: str,
    path: str,
    body,
    status: int,
    token: bool,
) -> None:
    headers = {"x-request-id": "err-1"}
    if token:
        headers["Authorization"] = f"Bearer {deployed.token}"
    answer = http.request(method, deployed.gateway.url + path, json=body, headers=headers)
    assert answer.status_code == status
    assert answer.headers.get_list("x-request-id") == ["err-1"]


def test_a_502_carries_the_id_and_its_log_line_too(
    start_gateway: Callable[..., Gateway], http: httpx.Client
) -> None:
    token, digest = make_token()
    gone = RoutedInstance(name="gone", url=free_port_refusing_connections())
    gateway = start_gateway(snapshot(1, service(unique("dead"), [gone], [digest], ("dead",))))
    with logged("gateway.plane") as lines:
        answer = completion(gateway, token, {"x-request-id": "gone-1"}, model="dead")
    assert answer.status_code == 502
    assert answer.headers["x-request-id"] == "gone-1"
    failed = [line for line in lines.getvalue().splitlines() if "instance gone" in line]
    assert failed and failed[0].endswith(" request_id=gone-1"), lines.getvalue()


def test_a_504_carries_the_id(start_gateway: Callable[..., Gateway], engines: list[Engine]):
    token, digest = make_token()
    svc = service(unique("slow"), [engines[0].instance], [digest], ("slow",))
    gateway = start_gateway(snapshot(1, svc), upstream_timeout=0.3)
    answer = completion(gateway, token, {"x-request-id": "slow-1"}, model="slow", delay=2)
    assert answer.status_code == 504
    assert answer.headers["x-request-id"] == "slow-1"


def test_both_legs_of_a_prefill_decode_call_carry_the_id(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    token, digest = make_token()
    prefill = replace(engines[0].instance, role="prefill")
    decode = replace(engines[1].instance, role="decode")
    svc = replace(service(unique("pd"), [prefill, decode], [digest], models=("pd",)),
                  pd=PdRouting("ExampleConnector"))  # fmt: skip
    gateway = start_gateway(snapshot(1, svc))
    test_id = uuid.uuid4().hex
    answer = completion(gateway, token, {"x-test-id": test_id}, model="pd", stream=True)
    assert answer.status_code == 200
    request_id = answer.headers["x-request-id"]
    assert engines[0].recorder.seen[test_id].headers["x-request-id"] == request_id
    assert engines[1].recorder.seen[test_id].headers["x-request-id"] == request_id


def test_an_engines_echoed_id_is_not_doubled(
    start_gateway: Callable[..., Gateway], http: httpx.Client
) -> None:
    """vLLM answers with the x-request-id it was sent: the client gets one, the gateway's."""
    echoing = ServerThread(Starlette(routes=[Route("/v1/completions", _echo_id, methods=["POST"])]))
    echoing.start()
    try:
        token, digest = make_token()
        engine = RoutedInstance(name="echo", url=echoing.url)
        gateway = start_gateway(snapshot(1, service(unique("echo"), [engine], [digest], ("e",))))
        answer = completion(gateway, token, {"x-request-id": "mine"}, model="e")
        assert answer.json() == {"seen": "mine"}
        assert answer.headers.get_list("x-request-id") == ["mine"]
    finally:
        echoing.stop()


async def _echo_id(request: Request) -> JSONResponse:
    seen = request.headers.get("x-request-id", "")
    return JSONResponse({"seen": seen}, headers={"x-request-id": f"engine-{seen}"})


@contextlib.contextmanager
def logged(name: str) -> Iterator[io.StringIO]:
    """Lines the named logger writes meanwhile, in Wharf's text format, as they are emitted
    (in the request's context: that is where the id comes from)."""
    logger, lines = logging.getLogger(name), io.StringIO()
    handler, level = logging.StreamHandler(lines), logger.level
    handler.setFormatter(TextFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# --- the gateway as `python -m gateway` runs it ---------------------------------------------


@pytest.fixture
def gateway_process(redis_url: str) -> Iterator[Callable[..., subprocess.Popen]]:
    started: list[subprocess.Popen] = []

    def start(port: int, *args: str, **env: str) -> subprocess.Popen:
        environ = {**os.environ, "REDIS_URL": redis_url, "WHARF_SECRET_KEY": "log-tests",
                   "PYTHONPATH": str(ROOT), **env}  # fmt: skip
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--port", str(port), *args],
            cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_json_logs_with_the_request_id_and_no_query(gateway_process) -> None:
    port = _free_port()
    process = gateway_process(port, "--access-log", WHARF_LOG_FORMAT="json")
    url = f"http://127.0.0.1:{port}"
    _wait_listening(port, process)
    secret = "wsk-" + "s3cret" * 6
    with httpx.Client(trust_env=False, timeout=5) as client:
        client.get(f"{url}/v1/models?api_key={secret}", headers={"x-request-id": "json-1"})
        made = client.get(f"{url}/healthz").headers["x-request-id"]
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    entries = [json.loads(line) for line in stderr.splitlines()]  # every line is JSON
    assert len(entries) >= 4, stderr  # started, running, two requests, stopped
    for entry in entries:
        assert TIMESTAMP.fullmatch(entry["timestamp"]), entry
        assert entry["level"] and entry["logger"] and entry["message"], entry
    access = {e["request_id"]: e["message"] for e in entries if e["logger"] == "uvicorn.access"}
    assert access.keys() == {"json-1", made}
    assert '"GET /v1/models HTTP/1.1" 401' in access["json-1"]
    assert "s3cret" not in stderr and "api_key" not in stderr


def test_an_unknown_log_format_stops_the_gateway_naming_the_variable(gateway_process) -> None:
    process = gateway_process(_free_port(), WHARF_LOG_FORMAT="yaml")
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 2
    assert "WHARF_LOG_FORMAT='yaml' is not a log format" in stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_listening(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"the gateway did not listen on {port} (exit {process.poll()})")
