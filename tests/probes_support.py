"""What the probe tests on real runtimes share: an engine whose answers the test steers with
files, services placed straight into the database, and agent passes until a row says so."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

from django.conf import settings
from django.db import transaction

from contracts.engine_keys import engine_key
from controlplane.services.choices import InstanceState
from controlplane.services.models import Event, Instance, Service
from controlplane.services.versions import record_version
from tests.api_support import default_workspace
from workers.fleet import FleetSettings
from workers.nodes.agent import converge
from workers.nodes.starter import start_instance

# Restarts wait long enough that a test sees the back-off a failed probe caused.
FLEET = FleetSettings(backoff_base=120, health_timeout=60, drain_settle=0)

# An engine: after LISTEN_AFTER seconds it listens on $PORT, and on $EXTRA_PORT if set;
# GET /health answers 200 while the file `healthy` is in FLAGS, 500 otherwise.
SERVER = r"""
import os, pathlib, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
flags = pathlib.Path(os.environ["FLAGS"])
time.sleep(float(os.environ.get("LISTEN_AFTER", "0")))
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if (flags / "healthy").exists() else 500)
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
ports = [os.environ["PORT"]] + ([os.environ["EXTRA_PORT"]] if os.environ.get("EXTRA_PORT") else [])
servers = [ThreadingHTTPServer(("0.0.0.0", int(p)), Handler) for p in ports]
for server in servers[1:]:
    threading.Thread(target=server.serve_forever, daemon=True).start()
servers[0].serve_forever()
"""


def placed(spec: dict, node: str = "local") -> Instance:
    """The spec's service, saved as the API would, with one instance placed on `node`."""
    with transaction.atomic():
        service = Service.objects.create(workspace=default_workspace(), name=spec["name"],
                                         spec=spec)  # fmt: skip
        version = record_version(service, spec, "created")
    return Instance.objects.create(service=service, name=f"{spec['name']}-1", node=node,
                                   spec_hash=version.spec_hash,
                                   state=InstanceState.CREATING)  # fmt: skip


def history(row: Instance) -> str:
    events = Event.objects.filter(service=row.service_id).order_by("id")
    return "\n".join(f"{e.reason}: {e.message}" for e in events)


def until(
    runtime, row: Instance, done: Callable[[Instance], bool], timeout: float = 30,
    node: str = "local",
) -> Instance:  # fmt: skip
    """Agent passes on `node` (starts run in the pass) until the row is `done`; the row."""
    deadline = time.monotonic() + timeout
    clock: dict = {}

    def start(name: str) -> None:
        start_instance(name, node, runtime, FLEET)

    while True:
        converge(node, runtime, FLEET, start, probe_clock=clock)
        row.refresh_from_db()
        if done(row):
            return row
        assert time.monotonic() < deadline, (
            f"still {row.state} ({row.message}); events:\n{history(row)}\n"
            f"logs:\n{runtime.logs(row.name)}"
        )
        time.sleep(0.3)


def state(*states: str) -> Callable[[Instance], bool]:
    return lambda row: row.state in states


def front_get(row: Instance) -> str:
    """GET / of the instance through its front, with its engine key. A readiness check that
    probes a sidecar's port says nothing of the main container, which may still be starting
    to listen: its front answers 502 until it does, so a 502 is asked again for 15 s."""
    key = engine_key(settings.WHARF_TOKEN_KEY.encode(), row.name)
    asked = urllib.request.Request(row.url + "/", headers={"Authorization": f"Bearer {key}"})
    deadline = time.monotonic() + 15
    while True:
        try:
            with urllib.request.urlopen(asked, timeout=10) as answer:
                return answer.read().decode()
        except urllib.error.HTTPError as refused:
            if refused.code != 502 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)
