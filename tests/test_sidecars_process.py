"""Several containers in one instance on the process runtime, with the real starter, node
agent and front: the main process answers with what it fetched from its sidecar on
localhost; the sidecar has its own environment, not the main one's; when the sidecar ends,
the whole instance ends and restarts; removing it stops every process of it. And the
supervisor (workers/runtimes/process_pod.py) on its own: the first child to end ends all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.utils import timezone

from controlplane.services.choices import InstanceState
from tests.api_support import grant
from tests.probes_support import front_get, history, placed, state, until
from workers.runtimes.process import POD, ProcessRuntime, free_port

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

# The main container: GET / answers what GET / of the sidecar (at SIDE_PORT) answered.
MAIN = r"""
import os, urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        side = f"http://127.0.0.1:{os.environ['SIDE_PORT']}/"
        body = b"main saw: " + urllib.request.urlopen(side, timeout=5).read()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""
# The sidecar: writes its pid to PID_FILE, answers its GREETING and what it sees of MARK
# (the main container's) and WHARF_SECRET_KEY (the worker's).
SIDE = r"""
import os, pathlib
from http.server import BaseHTTPRequestHandler, HTTPServer
pathlib.Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        seen = {k: os.environ.get(k, "") for k in ("MARK", "WHARF_SECRET_KEY")}
        body = f"{os.environ['GREETING']} {seen}".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", int(os.environ["LISTEN"])), Handler).serve_forever()
"""


@pytest.fixture
def runtime(tmp_path, settings) -> Iterator[ProcessRuntime]:
    grant(process_code=True)  # a workspace's own commands, on the node's account
    (tmp_path / "main.py").write_text(MAIN)
    (tmp_path / "side.py").write_text(SIDE)
    found = ProcessRuntime(str(tmp_path / "models"), tmp_path / "instances")
    yield found
    for instance in found.list():
        found.remove(instance.name)


def service(tmp_path: Path, side_port: int) -> dict:
    def env(**values: str) -> list[dict]:
        return [{"name": k, "value": v} for k, v in values.items()]

    return {"name": "pod-local", "containers": [
        {"image": "none", "port": 8000, "command": f"exec {sys.executable} {tmp_path}/main.py",
         "env": env(SIDE_PORT=str(side_port), MARK="main"),
         # Ready once the sidecar answers: a probe of its port, through the main one's front.
         "readiness_check": {"http_get": {"path": "/", "port": side_port},
                             "initial_delay_seconds": 0, "period_seconds": 1}},
        {"image": "none", "port": side_port,
         "command": f"exec {sys.executable} {tmp_path}/side.py",
         "env": env(LISTEN=str(side_port), GREETING="hello from the sidecar",
                    PID_FILE=str(tmp_path / "side.pid"))},
    ]}  # fmt: skip


def sidecar_pid(tmp_path: Path, old: int | None = None) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with_pid = tmp_path / "side.pid"
        if with_pid.exists() and with_pid.read_text() and int(with_pid.read_text()) != old:
            return int(with_pid.read_text())
        time.sleep(0.1)
    raise AssertionError("the sidecar never wrote its pid")


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_local_instance_serves_through_its_sidecar_and_restarts_whole(
    tmp_path, runtime, monkeypatch
):
    monkeypatch.setenv("WHARF_SECRET_KEY", "the-workers-own")
    row = placed(service(tmp_path, free_port()))
    row = until(runtime, row, state(InstanceState.READY))
    seen = "{'MARK': '', 'WHARF_SECRET_KEY': ''}"  # its own env: not the main's, not the worker's
    assert front_get(row) == f"main saw: hello from the sidecar {seen}"
    pid = sidecar_pid(tmp_path)
    os.kill(pid, signal.SIGKILL)
    row = until(runtime, row, state(InstanceState.BACKOFF))
    assert "containers[1] exited with status" in history(row)
    assert runtime.list() and not runtime.list()[0].running  # the main one stopped too
    type(row).objects.filter(pk=row.pk).update(restart_at=timezone.now())
    row = until(runtime, row, state(InstanceState.READY))
    assert row.restarts == 1 and sidecar_pid(tmp_path, old=pid) != pid
    assert front_get(row).startswith("main saw: hello")
    new = sidecar_pid(tmp_path)
    runtime.remove(row.name)
    deadline = time.monotonic() + 20
    while alive(new) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(new)  # stopped with the instance's group


def supervise(tmp_path: Path, main: list[str], sidecars: list[dict]) -> subprocess.Popen:
    file = tmp_path / "sidecars.json"
    file.write_text(json.dumps(sidecars))
    args = [sys.executable, "-I", str(POD), "--sidecars", str(file), "--", *main]
    # In a group of its own, as the process runtime (or a front) starts it.
    return subprocess.Popen(args, stderr=subprocess.PIPE, text=True, start_new_session=True)


def sidecar(index: int, line: str, **env: str) -> dict:
    return {
        "index": index,
        "args": ["/bin/sh", "-c", line],
        "env": {"PATH": "/bin:/usr/bin", **env},
    }


def test_the_supervisor_ends_all_when_a_sidecar_ends_with_its_status(tmp_path):
    proc = supervise(tmp_path, ["sleep", "30"], [sidecar(1, "sleep 30"), sidecar(2, "exit 3")])
    assert proc.wait(15) == 3
    # read() ends once every process holding stderr has: the sidecars' sleeps too
    assert "containers[2] exited with status 3; stopping the instance" in proc.stderr.read()


def test_the_supervisor_ends_all_when_the_main_command_ends(tmp_path):
    marker = tmp_path / "side-ran"
    side = sidecar(1, f'echo "$ONLY_MINE" > {marker}; exec sleep 30', ONLY_MINE="x")
    proc = supervise(tmp_path, ["/bin/sh", "-c", "sleep 1; exit 0"], [side])
    started = time.monotonic()
    assert proc.wait(15) == 0 and time.monotonic() - started < 10  # the sidecar was stopped
    assert "containers[0] exited with status 0" in proc.stderr.read()
    assert marker.read_text().strip() == "x"


def test_the_supervisor_stops_the_others_when_a_sidecar_cannot_start(tmp_path):
    missing = {"index": 1, "args": [str(tmp_path / "absent")], "env": {}}
    proc = supervise(tmp_path, ["sleep", "30"], [missing])
    assert proc.wait(15) == 127
    assert "containers[1] did not start" in proc.stderr.read()
