"""The health checks of deploy/compose/ and deploy/systemd/ on /readyz: each command, as the
files give it, run against a real HTTP server standing in for the API or the gateway on the
port the command names (moved to a free one): healthy on 200, not on 503, and systemd's start
waits through 503s until the part is ready."""

from __future__ import annotations

import os
import re
import shlex
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from tests.tls_support import self_signed

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "deploy/compose/compose.yaml"
SYSTEMD = ROOT / "deploy/systemd"
PORTS = {"api": 8000, "gateway": 9000}


class Readiness(ThreadingHTTPServer):
    """Answers GET /readyz with the next status of `statuses` (the last one from then on)."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses, self.paths = list(statuses), []
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: Readiness

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.server.paths.append(self.path)
        statuses = self.server.statuses
        status = statuses.pop(0) if len(statuses) > 1 else statuses[0]
        self.send_response(status if self.path == "/readyz" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def readiness(request) -> Iterator[Readiness]:
    server = Readiness(request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def moved(command: list[str], part: str, server: Readiness) -> list[str]:
    """`command` probing `server` instead of the part's own port on 127.0.0.1."""
    assert command[1:4] == ["-m", "contracts.readiness_probe", str(PORTS[part])], command
    return [*command[:3], str(server.server_address[1]), *command[4:]]


def compose_check(part: str) -> list[str]:
    test = yaml.safe_load(COMPOSE.read_text())["services"][part]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"]  # the image's Python: no curl in it
    return [sys.executable, *test[2:]]


def systemd_check(part: str) -> list[str]:
    unit = (SYSTEMD / f"wharf-{part}.service").read_text()
    (line,) = re.findall(r"^ExecStartPost=(.*)$", unit, re.MULTILINE)
    args = shlex.split(line)
    assert args[0] == "/opt/wharf/.venv/bin/python"  # the unit's own virtualenv
    return [sys.executable, *args[1:]]


def plain_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "WHARF_TLS_CERT"}


@pytest.mark.parametrize("part", PORTS)
@pytest.mark.parametrize(("readiness", "healthy"), [([200], True), ([503], False)],
                         indirect=["readiness"])  # fmt: skip
def test_the_compose_health_check_follows_readyz(part, readiness, healthy):
    command = moved(compose_check(part), part, readiness)
    run = subprocess.run(command, capture_output=True, timeout=30, env=plain_env(), cwd=ROOT)
    assert (run.returncode == 0) is healthy, run.stderr
    assert readiness.paths == ["/readyz"]


@pytest.mark.parametrize("part", PORTS)
@pytest.mark.parametrize("readiness", [[503, 503, 200]], indirect=True)
def test_the_systemd_start_waits_until_readyz_answers_200(part, readiness):
    command = moved(systemd_check(part), part, readiness)
    run = subprocess.run(command, capture_output=True, text=True, timeout=60, env=plain_env(),
                         cwd=ROOT)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert readiness.paths == ["/readyz"] * 3  # two 503s retried, then ready


@pytest.mark.parametrize("part", PORTS)
def test_the_systemd_start_gives_readiness_time_within_the_start_timeout(part):
    unit = (SYSTEMD / f"wharf-{part}.service").read_text()
    args = systemd_check(part)
    wait = float(args[args.index("--wait") + 1])
    limit = int(re.search(r"^TimeoutStartSec=(\d+)$", unit, re.MULTILINE).group(1))
    # The last try may begin just before the wait ends and take its 3 s timeout.
    assert wait >= 60 and wait + 5 < limit


@pytest.mark.parametrize("readiness", [[200]], indirect=True)
def test_the_health_check_speaks_https_when_tls_is_on(readiness, tmp_path):
    """With WHARF_TLS_CERT set the server speaks only HTTPS: the probe does too."""
    cert, key = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    readiness.socket = context.wrap_socket(readiness.socket, server_side=True)
    command = moved(compose_check("gateway"), "gateway", readiness)
    plain = subprocess.run(command, capture_output=True, timeout=30, env=plain_env(), cwd=ROOT)
    assert plain.returncode == 1 and readiness.paths == []
    env = {**plain_env(), "WHARF_TLS_CERT": str(cert)}
    run = subprocess.run(command, capture_output=True, timeout=30, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert readiness.paths == ["/readyz"]
