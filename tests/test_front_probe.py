"""The front's probe door (gateway.front, /.wharf/probe), as a real process before real
servers: EAS's http_get and tcp_socket probes of the ports a spec's probes name, with the
engine key only; any other port is refused, and the probed server hears only the probe."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode

import httpx
import pytest

from contracts import engine_front as front
from tests.test_engine_front import FRONT, KEY, bearer
from workers.runtimes.process import ROOT, free_port


class Probed(ThreadingHTTPServer):
    """A server whose paths answer the status the test sets (404 when unset)."""

    def __init__(self) -> None:
        self.status: dict[str, int] = {}
        self.asked: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.asked.append(self.path)
                self.send_response(server.status.get(self.path, 404))
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server_address[1]


@pytest.fixture
def servers() -> Iterator[tuple[Probed, Probed]]:
    found = (Probed(), Probed())
    yield found
    for server in found:
        server.shutdown()
        server.server_close()


@pytest.fixture
def late_port() -> int:
    return free_port()


@pytest.fixture
def url(servers, late_port) -> Iterator[str]:
    """A front before the engine (the first server), told to probe: the spec's port 8000 (the
    engine's, at its real port), 9000 (the second server) and 9100 (nothing, until a test
    opens it)."""
    engine, other = servers
    port = free_port()
    args = [*FRONT, "--listen", f"127.0.0.1:{port}", "--upstream", f"127.0.0.1:{engine.port}",
            "--probe-port", f"8000={engine.port}", "--probe-port", f"9000={other.port}",
            "--probe-port", f"9100={late_port}"]  # fmt: skip
    proc = subprocess.Popen(args, env={**os.environ, front.KEY_ENV: KEY}, cwd=ROOT,
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 10
    while not accepts(port):
        assert proc.poll() is None and time.monotonic() < deadline, "the front did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    assert proc.wait(10) == 0


def accepts(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def probe(url: str, key: str = KEY, **query) -> httpx.Response:
    return httpx.get(f"{url}{front.PROBE_PATH}?{urlencode(query)}", headers=bearer(key),
                     trust_env=False, timeout=10)  # fmt: skip


def test_an_http_probe_passes_on_2xx_or_3xx_and_fails_otherwise(servers, url):
    engine, other = servers
    engine.status.update({"/health": 200, "/moved": 302, "/broken": 500})
    assert probe(url, port=8000, path="/health").status_code == 200
    assert probe(url, port=8000, path="/moved").status_code == 200
    assert probe(url, port=8000, path="/broken").status_code == 503
    assert probe(url, port=9000, path="/health").status_code == 503  # the other server's 404
    other.status["/health"] = 200
    assert probe(url, port=9000, path="/health").status_code == 200
    assert engine.asked == ["/health", "/moved", "/broken"]


def test_a_tcp_probe_passes_once_its_port_accepts(url, late_port):
    assert probe(url, port=9100).status_code == 503
    with socket.create_server(("127.0.0.1", late_port)):
        assert probe(url, port=9100).status_code == 200


def test_a_probe_slower_than_its_timeout_fails(servers, url, late_port):
    with socket.create_server(("127.0.0.1", late_port)):  # accepts, never answers
        started = time.monotonic()
        assert probe(url, port=9100, path="/health", timeout=1).status_code == 503
        assert time.monotonic() - started < 5


def test_only_the_ports_the_spec_probes_are_reached(servers, url):
    engine, _ = servers
    refused = probe(url, port=engine.port, path="/health")  # the engine's real port, unnamed
    assert refused.status_code == 403 and "not one this instance's probes name" in refused.text
    assert probe(url, port=6379).status_code == 403
    assert engine.asked == []


@pytest.mark.parametrize(
    "query",
    [{}, {"port": "x"}, {"port": 8000, "path": "health"}, {"port": 8000, "path": "/a/../b"},
     {"port": 8000, "path": "/h\r\nX-Evil: 1"}, {"port": 8000, "path": "/h?x=1"}],
)  # fmt: skip
def test_a_malformed_probe_is_refused_and_reaches_nothing(servers, url, query):
    engine, _ = servers
    assert probe(url, **query).status_code == 400
    assert engine.asked == []


def test_without_the_engine_key_nothing_is_probed(servers, url):
    engine, _ = servers
    engine.status["/health"] = 200
    assert probe(url, key="wek-wrong", port=8000, path="/health").status_code == 401
    assert engine.asked == []
