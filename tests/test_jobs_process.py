"""Elastic jobs on the process runtime with the real starter and node agent: a command that
exits 0 has succeeded, is kept as it ended and not run again; one that exits 1 and then 0 is
retried after its back-off and then has succeeded. The scheduler's phase for both."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.utils import timezone

from controlplane.nodes.models import Node
from controlplane.services.choices import InstanceState
from controlplane.services.models import Event, Instance
from tests.api_support import grant
from tests.probes_support import history, placed
from workers.fleet import FleetSettings
from workers.nodes.agent import converge
from workers.nodes.starter import start_instance
from workers.runtimes.process import ProcessRuntime
from workers.scheduling.scheduler import schedule

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]
FLEET = FleetSettings(backoff_base=1, drain_settle=0)


@pytest.fixture
def runtime(tmp_path, settings, store, redis_url) -> Iterator[ProcessRuntime]:
    settings.REDIS_URL = redis_url
    grant(process_code=True)  # a workspace's own command, on the node's account
    found = ProcessRuntime(str(tmp_path / "models"), tmp_path / "instances")
    yield found
    for instance in found.list():
        found.remove(instance.name)


def job(name: str, command: str) -> dict:
    return {"name": name, "containers": [{"image": "none", "port": 8000, "command": command}],
            "metadata": {"workload_type": "elasticjob"}}  # fmt: skip


def until_done(runtime, row: Instance, states: tuple[str, ...], timeout: float = 60) -> Instance:
    """Agent and scheduler passes (its node heartbeating) until the row is in `states`."""
    deadline = time.monotonic() + timeout

    def start(name: str) -> None:
        start_instance(name, "local", runtime, FLEET)

    while True:
        Node.objects.update_or_create(name="local", defaults={
            "address": "127.0.0.1", "heartbeat_at": timezone.now()})  # fmt: skip
        converge("local", runtime, FLEET, start)
        schedule(row.service.name, FLEET)
        row.refresh_from_db()
        if row.state in states:
            return row
        assert time.monotonic() < deadline, f"still {row.state}; events:\n{history(row)}"
        time.sleep(0.3)


def test_a_command_that_exits_0_has_succeeded_and_the_job_completed(tmp_path, runtime):
    marks = tmp_path / "runs"
    row = placed(job("once", f"echo run >> {marks}; echo exported"))
    row = until_done(runtime, row, (InstanceState.SUCCEEDED, InstanceState.FAILED))
    assert row.state == InstanceState.SUCCEEDED, history(row)
    assert row.restarts == 0
    row.service.refresh_from_db()
    assert (row.service.phase, row.service.progress) == ("completed", "1/1 instances succeeded")
    event = Event.objects.get(service=row.service_id, reason="InstanceSucceeded")
    assert "exported" in event.message  # its last log lines
    for _ in range(5):  # kept as it ended: never started again
        converge("local", runtime, FLEET, lambda name: start_instance(name, "local", runtime,
                                                                      FLEET))  # fmt: skip
        time.sleep(0.2)
    assert marks.read_text() == "run\n"
    row.refresh_from_db()
    assert row.state == InstanceState.SUCCEEDED


def test_a_command_that_exits_1_then_0_is_retried_then_succeeds(tmp_path, runtime):
    flag = tmp_path / "ran"
    command = f"if [ -f {flag} ]; then exit 0; fi; touch {flag}; exit 1"
    row = placed(job("flaky", command))
    row = until_done(runtime, row, (InstanceState.BACKOFF,))
    assert "exited with code 1" in row.message and row.restarts == 1
    row = until_done(runtime, row, (InstanceState.SUCCEEDED, InstanceState.FAILED))
    assert row.state == InstanceState.SUCCEEDED, history(row)
    assert row.restarts == 1
    row.service.refresh_from_db()
    assert row.service.phase == "completed"
