"""The health checks of deploy/compose/ and deploy/systemd/ on /readyz: each command, as the
files give it, run against a real HTTP server standing in for the API or the gateway on the
port the command names (moved to a free one): healthy on 200, not on 503, and systemd's start
waits through 503s until the part is ready."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

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


def moved(command: str, part: str, server: Readiness) -> str:
    """`command` calling `server` instead of the part's own port on 127.0.0.1."""
    old = f"127.0.0.1:{PORTS[part]}/readyz"
    assert old in command, command
    return command.replace(old, f"127.0.0.1:{server.server_address[1]}/readyz")


def compose_check(part: str) -> list[str]:
    test = yaml.safe_load(COMPOSE.read_text())["services"][part]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"]  # the image's Python: no curl in it
    return [sys.executable, *test[2:]]


def systemd_check(part: str) -> list[str]:
    unit = (SYSTEMD / f"wharf-{part}.service").read_text()
    (line,) = re.findall(r"^ExecStartPost=(.*)$", unit, re.MULTILINE)
    return shlex.split(line)


@pytest.mark.parametrize("part", PORTS)
@pytest.mark.parametrize(("readiness", "healthy"), [([200], True), ([503], False)],
                         indirect=["readiness"])  # fmt: skip
def test_the_compose_health_check_follows_readyz(part, readiness, healthy):
    command = compose_check(part)
    command[-1] = moved(command[-1], part, readiness)
    run = subprocess.run(command, capture_output=True, timeout=30)
    assert (run.returncode == 0) is healthy, run.stderr
    assert readiness.paths == ["/readyz"]


@pytest.mark.parametrize("part", PORTS)
@pytest.mark.parametrize("readiness", [[503, 503, 200]], indirect=True)
def test_the_systemd_start_waits_until_readyz_answers_200(part, readiness):
    if not shutil.which("curl"):
        pytest.fail("curl not found (apt-get install curl)")
    command = [moved(arg, part, readiness) if "/readyz" in arg else arg
               for arg in systemd_check(part)]  # fmt: skip
    assert command[0] == "/usr/bin/curl"
    run = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert readiness.paths == ["/readyz"] * 3  # two 503s retried, then ready


@pytest.mark.parametrize("part", PORTS)
def test_the_systemd_start_gives_readiness_time_within_the_start_timeout(part):
    unit = (SYSTEMD / f"wharf-{part}.service").read_text()
    args = systemd_check(part)
    retries = int(args[args.index("--retry") + 1])
    delay = int(args[args.index("--retry-delay") + 1])
    limit = int(re.search(r"^TimeoutStartSec=(\d+)$", unit, re.MULTILINE).group(1))
    assert "--fail" in args and "--retry-connrefused" in args
    assert 60 <= retries * delay < limit
