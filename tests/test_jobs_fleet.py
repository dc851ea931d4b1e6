"""Elastic jobs through the scheduler and the node agents, on in-memory runtimes (tests.
fleet_support) with the real database and Redis: a job's instances run to their end, exit 0
is done for good (its cards free), a failure is retried a bounded number of times, and a new
intent runs it again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from contracts.routing import SNAPSHOT_KEY, Snapshot
from controlplane.services.models import Event, Service
from tests.fleet_support import FLEET, Fleet
from tests.test_fleet import custom, deploy, update

pytestmark = pytest.mark.django_db

JOB = {"workload_type": "elasticjob"}


@pytest.fixture
def fleet(store, settings, redis_url):
    settings.REDIS_URL = redis_url
    return Fleet()


def job(name: str, instances: int = 1, gpu: int = 0) -> dict:
    spec = custom(name, instances, gpu)
    spec["metadata"].update(JOB)
    return spec


def phase(name: str) -> tuple[str, str]:
    service = Service.objects.get(name=name)
    return service.phase, service.progress


def end(fleet: Fleet, node: str, service: str, code: int) -> None:
    for row in fleet.rows(service):
        if row.state == "starting":
            fleet.runtimes[node].exit(row.name, code)


def test_a_job_that_exits_0_has_succeeded_and_frees_its_cards(fleet, store):
    fleet.node("n1", cards=1)
    deploy(job("export", gpu=1))
    fleet.settle(3)
    assert fleet.states("export") == [("n1", "starting")]  # runs, never probed into routing
    assert phase("export") == ("running", "0/1 instances succeeded; 1 running")
    snapshot = Snapshot.from_json(store.get(SNAPSHOT_KEY))
    assert snapshot.services["export"].job and not snapshot.services["export"].instances
    end(fleet, "n1", "export", 0)
    fleet.settle(3)
    assert fleet.states("export") == [("n1", "succeeded")]
    assert phase("export") == ("completed", "1/1 instances succeeded")
    assert Event.objects.filter(service__name="export", reason="InstanceSucceeded").exists()
    deploy(custom("chat", gpu=1))  # the job's card is free for the next service
    fleet.settle(3)
    assert fleet.states("chat") == [("n1", "ready")]
    assert fleet.states("export") == [("n1", "succeeded")]  # not restarted, not replaced


def test_a_failed_run_is_retried_after_its_back_off_then_succeeds(fleet):
    fleet.node("n1")
    deploy(job("export"))
    fleet.settle(3)
    end(fleet, "n1", "export", 1)
    fleet.settle(2)
    (row,) = fleet.rows("export")
    assert (row.state, row.restarts) == ("backoff", 1)
    assert phase("export")[0] == "running"
    later = timezone.now() + timedelta(seconds=FLEET.backoff_base + 1)
    fleet.settle(2, now=later)
    assert fleet.states("export") == [("n1", "starting")]
    end(fleet, "n1", "export", 0)
    fleet.settle(2, now=later)
    assert fleet.states("export") == [("n1", "succeeded")]
    assert phase("export")[0] == "completed"


def test_a_job_that_keeps_failing_fails_after_its_retries(fleet):
    fleet.node("n1")
    deploy(job("export"))
    now = timezone.now()
    fleet.settle(3, now=now)
    for _ in range(FLEET.job_retries + 1):
        end(fleet, "n1", "export", 3)
        fleet.settle(2, now=now)  # into back-off (or failed, the last time)
        now += timedelta(seconds=FLEET.backoff_max + 1)
        fleet.settle(2, now=now)  # run again
    (row,) = fleet.rows("export")
    assert row.state == "failed" and "failed after 3 retries" in row.message
    service = Service.objects.get(name="export")
    assert service.phase == "failed" and "WHARF_JOB_RETRIES" in service.last_error
    fleet.settle(3, now=now + timedelta(hours=1))
    assert fleet.states("export") == [("n1", "failed")]  # not run again by itself


def test_an_update_runs_a_completed_job_again(fleet):
    fleet.node("n1")
    deploy(job("export", instances=2))
    fleet.settle(3)
    end(fleet, "n1", "export", 0)
    fleet.settle(3)
    assert phase("export")[0] == "completed"
    done = {r.name for r in fleet.rows("export")}
    update("export", job("export", instances=2))  # the same spec: a new intent all the same
    fleet.settle(4)
    rows = fleet.rows("export")
    assert [r.state for r in rows] == ["starting", "starting"]
    assert not done & {r.name for r in rows}
    assert phase("export")[0] == "running"


def test_start_runs_a_completed_job_again_and_leaves_a_service_alone(fleet, api):
    fleet.node("n1")
    deploy(job("export"))
    deploy(custom("chat"))
    fleet.settle(3)
    end(fleet, "n1", "export", 0)
    fleet.settle(3)
    (done,) = fleet.rows("export")
    assert api.post("/api/v1/services/export/start").status_code == 202
    assert api.post("/api/v1/services/chat/start").status_code == 202
    assert Service.objects.get(name="export").generation == 2
    assert Service.objects.get(name="chat").generation == 1  # already running: nothing new
    fleet.settle(4)
    (again,) = fleet.rows("export")
    assert again.name != done.name and again.state == "starting"


def test_a_completed_job_holds_no_instance_quota(fleet, api):
    from controlplane.workspaces.quota_checks import held_by
    from tests.api_support import default_workspace

    fleet.node("n1")
    deploy(job("export", instances=2))
    fleet.settle(3)
    assert held_by(default_workspace()).instances == 2
    end(fleet, "n1", "export", 0)
    fleet.settle(3)
    assert phase("export")[0] == "completed"
    assert (held_by(default_workspace()).services, held_by(default_workspace()).instances) == (1, 0)
