"""An engine's front (gateway.front), as a real process in front of a real HTTP server: a
connection without the instance's engine key gets a 401 and the engine hears nothing; with
it, the connection is relayed both ways; the readiness door, the metrics door for
Prometheus, a head too large, and a front that starts its engine and exits with its code."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from contracts import engine_front as front
from workers.runtimes.process import ROOT, free_port

KEY = "wek-" + "a" * 64
TOKEN = "metrics-token-1"
FRONT = [sys.executable, "-m", "gateway.front"]


class Engine(ThreadingHTTPServer):
    """An engine that answers every GET with its path and remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as real servers: no write waits for a delayed ACK

            def do_GET(self) -> None:
                engine.asked.append(self.path)
                body = self.path.encode()
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server_address[1]


def start_front(
    upstream: int, *command: str, env: dict | None = None
) -> tuple[subprocess.Popen, str]:
    port = free_port()
    args = [*FRONT, "--listen", f"127.0.0.1:{port}",
            "--upstream", f"127.0.0.1:{upstream}", "--metrics-path", "/metrics"]  # fmt: skip
    if command:
        args += ["--", *command]
    environment = {**os.environ, front.KEY_ENV: KEY, front.METRICS_TOKEN_ENV: TOKEN, **(env or {})}
    proc = subprocess.Popen(args, env=environment, stdout=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=ROOT)  # fmt: skip
    deadline = time.monotonic() + 10
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        assert proc.poll() is None and time.monotonic() < deadline, "the front did not start"
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture
def engine() -> Iterator[Engine]:
    server = Engine()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def url(engine: Engine) -> Iterator[str]:
    proc, address = start_front(engine.port)
    yield address
    proc.terminate()
    assert proc.wait(10) == 0


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.mark.parametrize(
    "headers", [{}, bearer("wek-wrong"), bearer(TOKEN), {"Authorization": KEY}]
)
def test_without_the_engine_key_the_engine_hears_nothing(engine, url, headers):
    answer = httpx.get(url + "/v1/models", headers=headers, trust_env=False)
    assert answer.status_code == 401
    assert "engine key" in answer.json()["error"]["message"]
    assert engine.asked == []


def test_with_the_key_a_connection_is_relayed_both_ways(engine, url):
    with httpx.Client(base_url=url, headers=bearer(KEY), trust_env=False) as client:
        assert client.get("/v1/models").text == "/v1/models"
        assert client.get("/tokenize?x=1").text == "/tokenize?x=1"  # one kept-alive connection
    assert engine.asked == ["/v1/models", "/tokenize?x=1"]


def test_readiness_says_whether_the_engine_accepts_connections(engine, url):
    ready = url + front.READY_PATH
    assert httpx.get(ready, headers=bearer(KEY), trust_env=False).status_code == 200
    assert httpx.get(ready, trust_env=False).status_code == 401
    engine.shutdown()
    engine.server_close()
    assert httpx.get(ready, headers=bearer(KEY), trust_env=False).status_code == 503
    answer = httpx.get(url + "/health", headers=bearer(KEY), trust_env=False)
    assert answer.status_code == 502 and "not accepting" in answer.text
    assert engine.asked == []


def test_the_metrics_token_opens_one_get_of_the_metrics_page_and_nothing_after_it(engine, url):
    assert httpx.get(url + "/metrics", headers=bearer(TOKEN), trust_env=False).text == "/metrics"
    assert httpx.post(url + "/metrics", headers=bearer(TOKEN), trust_env=False).status_code == 401
    assert httpx.get(url + "/v1/models", headers=bearer(TOKEN), trust_env=False).status_code == 401
    # A second request sent behind the first on the same connection never reaches the engine.
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        ask = f"GET /metrics HTTP/1.1\r\nHost: e\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        sock.sendall((ask + "GET /v1/secret HTTP/1.1\r\nHost: e\r\n\r\n").encode())
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    assert received.count(b"HTTP/1.1 200") == 1
    assert engine.asked == ["/metrics", "/metrics"]


def test_a_head_too_large_is_refused(engine, url):
    answer = httpx.get(url + "/", headers={**bearer(KEY), "x-big": "a" * 70_000}, trust_env=False)
    assert answer.status_code == 431 and engine.asked == []


def test_a_front_exits_with_its_engines_code_and_the_engine_never_holds_the_key(engine):
    seen = (
        "import os, sys, time; time.sleep(0.5); "
        "print(sorted(k for k in os.environ if k.startswith('WHARF_FRONT'))); sys.exit(3)"
    )
    proc, _ = start_front(engine.port, sys.executable, "-c", seen)
    out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 3
    assert out.strip() == "[]"


def test_a_stopped_front_waits_for_its_engine_to_stop(engine):
    """The runtime signals the instance's process group (front and engine) and waits."""
    stops = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(7)); "
        "print('up', flush=True); time.sleep(60)"
    )
    proc, _ = start_front(engine.port, sys.executable, "-c", stops)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(15) == 7


def test_the_front_refuses_to_start_without_a_key():
    args = [*FRONT, "--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2"]
    env = {k: v for k, v in os.environ.items() if k != front.KEY_ENV}
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=10, cwd=ROOT)
    assert done.returncode == 2 and front.KEY_ENV in done.stderr
