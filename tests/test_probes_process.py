"""EAS's container probes on the process runtime, passing and failing on a real engine
process behind its real front, with the real starter and node agent: readiness routes and
unroutes, liveness restarts, a startup probe holds a slow engine and fails one that never
comes up, exec runs where and as the engine runs; a port a local process cannot own is
refused."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from controlplane.services.choices import InstanceState
from tests.api_support import grant
from tests.probes_support import FLEET, SERVER, placed, state, until
from workers.nodes.agent import converge
from workers.runtimes.process import ProcessRuntime

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]
FAST = {"initial_delay_seconds": 0, "period_seconds": 1, "timeout_seconds": 1}
ROW_WRITE = 'UPDATE "services_instance"'
READY, STARTING, UNHEALTHY = InstanceState.READY, InstanceState.STARTING, InstanceState.UNHEALTHY


@pytest.fixture
def runtime(tmp_path, settings) -> Iterator[ProcessRuntime]:
    grant(process_code=True)  # a workspace's own command, on the node's account
    (tmp_path / "server.py").write_text(SERVER)
    found = ProcessRuntime(str(tmp_path / "models"), tmp_path / "instances")
    yield found
    for instance in found.list():
        found.remove(instance.name)


def engine(tmp_path, name: str, env: dict | None = None, **probes) -> dict:
    variables = {"FLAGS": str(tmp_path), **(env or {})}
    return {"name": name, "containers": [{
        "image": "none", "port": 8000, "command": f"exec {sys.executable} {tmp_path}/server.py",
        "env": [{"name": k, "value": v} for k, v in variables.items()], **probes,
    }]}  # fmt: skip


def test_an_exec_readiness_probe_runs_in_the_engines_folder_and_environment(tmp_path, runtime):
    command = ["/bin/sh", "-c",
               'test -f ready && test "$MARK" = engine && test -z "$WHARF_FRONT_KEY"']  # fmt: skip
    row = placed(engine(tmp_path, "ex", {"MARK": "engine"}, readiness_check={
        "exec": {"command": command}, **FAST, "failure_threshold": 2}))  # fmt: skip
    row = until(runtime, row, state(STARTING))
    until(runtime, row, lambda r: r.probe_failures >= 2)  # no file yet: not ready
    ready = runtime.state_dir / "ready"  # the engine's working directory
    ready.touch()
    until(runtime, row, state(READY))
    ready.unlink()
    row = until(runtime, row, state(UNHEALTHY))  # out of routing, not restarted
    assert row.restarts == 0
    ready.touch()
    until(runtime, row, state(READY))


def test_an_http_readiness_probe_fails_on_500_and_passes_on_200(tmp_path, runtime):
    row = placed(engine(tmp_path, "web", readiness_check={
        "http_get": {"path": "/health", "port": 8000}, **FAST}))  # fmt: skip
    row = until(runtime, row, lambda r: r.state == STARTING and r.probe_failures >= 2)
    (tmp_path / "healthy").touch()
    until(runtime, row, state(READY))


def test_a_startup_probe_waits_for_a_port_that_opens_late(tmp_path, runtime):
    row = placed(engine(tmp_path, "slow", {"LISTEN_AFTER": "3"}, startup_check={
        "tcp_socket": {"port": 8000}, **FAST, "failure_threshold": 20},
        liveness_check={"http_get": {"path": "/health", "port": 8000}, **FAST,
                        "failure_threshold": 1}))  # fmt: skip
    row = until(runtime, row, state(STARTING))
    # Liveness would fail at once (no `healthy` file): it waits for startup, so no restart.
    (tmp_path / "healthy").touch()
    row = until(runtime, row, state(READY, InstanceState.BACKOFF))
    assert row.state == READY and row.restarts == 0


def test_an_engine_that_never_passes_its_startup_probe_fails_to_start(tmp_path, runtime):
    row = placed(engine(tmp_path, "never", {"LISTEN_AFTER": "600"}, startup_check={
        "tcp_socket": {"port": 8000}, **FAST, "failure_threshold": 2}))  # fmt: skip
    row = until(runtime, row, state(InstanceState.BACKOFF))
    assert "not ready within 2 s (its startup check" in row.message


def test_a_failing_liveness_probe_restarts_the_engine(tmp_path, runtime):
    (tmp_path / "healthy").touch()
    live = {"http_get": {"path": "/health", "port": 8000}, **FAST, "failure_threshold": 2}
    row = placed(engine(tmp_path, "live", liveness_check=live))
    until(runtime, row, state(READY))
    (tmp_path / "healthy").unlink()
    row = until(runtime, row, state(InstanceState.BACKOFF))
    assert "liveness check failed 2 times" in row.message and runtime.list() == []


def test_a_probe_of_a_port_a_local_process_cannot_own_is_refused(tmp_path, runtime):
    row = placed(engine(tmp_path, "other", readiness_check={"tcp_socket": {"port": 9000}}))
    row = until(runtime, row, state(InstanceState.FAILED))
    assert "probes of port 9000" in row.message and "docker runtime" in row.message


def test_a_probe_that_changes_nothing_writes_nothing(tmp_path, runtime):
    """A ready instance that passes again, or an unhealthy one that fails again, leaves its
    row as it was; the agent keeps the probe's time. At fleet size a write per probe was most
    of the database's load (benchmarks/README.md, "Fleet at scale")."""
    (tmp_path / "healthy").touch()
    check = {"http_get": {"path": "/health", "port": 8000}, **FAST, "failure_threshold": 1}
    row = until(runtime, placed(engine(tmp_path, "quiet", readiness_check=check)), state(READY))
    clock: dict = {}

    def quiet_passes(count: int) -> list[str]:
        """The instance row writes of `count` passes, each after a probe came due."""
        writes = []
        for _ in range(count):
            time.sleep(1.1)  # a period (FAST: 1 s)
            with CaptureQueriesContext(connection) as queries:
                converge("local", runtime, FLEET, lambda name: None, probe_clock=clock)
            writes += [q["sql"] for q in queries if q["sql"].startswith(ROW_WRITE)]
        return writes

    assert quiet_passes(3) == []
    probed = [at for (kind, name, _), at in clock.items() if kind == "readiness"]
    assert probed and time.time() - probed[0] < 1.5  # it was probed, in the last pass
    (tmp_path / "healthy").unlink()
    row = until(runtime, row, state(UNHEALTHY))  # the change is written
    assert row.probe_failures == 1
    assert quiet_passes(2) == []  # and failing again changes nothing more
