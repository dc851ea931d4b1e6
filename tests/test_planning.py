from workers.planning import Desired, plan, status
from workers.runtimes.base import ObservedInstance


def observed(name, spec_hash="h1", running=True):
    return ObservedInstance("svc", name, spec_hash, running, "http://127.0.0.1:1")


def test_creates_missing_instances():
    result = plan("svc", Desired(2, "h1"), [observed("svc-a")])
    assert [o.name for o in result.keep] == ["svc-a"]
    assert len(result.create) == 1 and result.create[0].startswith("svc-")


def test_replaces_instances_of_an_old_spec():
    result = plan("svc", Desired(1, "h2"), [observed("svc-a", "h1")])
    assert [o.name for o in result.remove] == ["svc-a"]
    assert len(result.create) == 1


def test_removes_exited_and_surplus_instances():
    result = plan(
        "svc",
        Desired(1, "h1"),
        [observed("svc-a"), observed("svc-b"), observed("svc-c", running=False)],
    )
    assert [o.name for o in result.keep] == ["svc-a"]
    assert sorted(o.name for o in result.remove) == ["svc-b", "svc-c"]
    assert result.create == []


def test_stopped_service_removes_everything():
    result = plan("svc", Desired(0, ""), [observed("svc-a"), observed("svc-b")])
    assert len(result.remove) == 2 and not result.create


def test_does_not_create_when_forbidden():
    assert plan("svc", Desired(2, "h1", allow_create=False), []).create == []


def test_is_idempotent_once_converged():
    result = plan("svc", Desired(1, "h1"), [observed("svc-a")])
    assert not result.remove and not result.create


def test_phase_is_running_once_every_replica_is_ready():
    assert status("running", 2, 2, 2, "deploying", failed=False).phase == "running"


def test_phase_is_deploying_until_ready():
    assert status("running", 1, 0, 1, "pending", failed=False).phase == "deploying"


def test_running_service_losing_an_instance_is_degraded():
    assert status("running", 2, 1, 2, "running", failed=False).phase == "degraded"


def test_phase_while_stopping_and_stopped():
    assert status("stopped", 0, 0, 1, "running", failed=False).phase == "stopping"
    assert status("stopped", 0, 0, 0, "stopping", failed=False).phase == "stopped"


def test_failure_wins_over_progress():
    assert status("running", 1, 0, 0, "deploying", failed=True).phase == "failed"
