from workers.planning import Desired, plan, status
from workers.runtimes.base import ObservedInstance


def observed(name, spec_hash="h1", running=True, role=""):
    return ObservedInstance("svc", name, spec_hash, running, "http://127.0.0.1:1", role=role)


def test_creates_missing_instances():
    result = plan("svc", Desired({"": 2}, "h1"), [observed("svc-a")])
    assert [o.name for o in result.keep] == ["svc-a"]
    assert len(result.create) == 1 and result.create[0][1].startswith("svc-")


def test_replaces_instances_of_an_old_spec():
    result = plan("svc", Desired({"": 1}, "h2"), [observed("svc-a", "h1")])
    assert [o.name for o in result.remove] == ["svc-a"]
    assert len(result.create) == 1


def test_removes_exited_and_surplus_instances():
    result = plan(
        "svc",
        Desired({"": 1}, "h1"),
        [observed("svc-a"), observed("svc-b"), observed("svc-c", running=False)],
    )
    assert [o.name for o in result.keep] == ["svc-a"]
    assert sorted(o.name for o in result.remove) == ["svc-b", "svc-c"]
    assert result.create == []


def test_stopped_service_removes_everything():
    result = plan("svc", Desired({"": 0}, ""), [observed("svc-a"), observed("svc-b")])
    assert len(result.remove) == 2 and not result.create


def test_does_not_create_when_forbidden():
    assert plan("svc", Desired({"": 2}, "h1", allow_create=False), []).create == []


def test_is_idempotent_once_converged():
    result = plan("svc", Desired({"": 1}, "h1"), [observed("svc-a")])
    assert not result.remove and not result.create


def test_phase_is_running_once_every_replica_is_ready():
    assert status("running", {"": 2}, {"": 2}, 2, "deploying", failed=False).phase == "running"


def test_phase_is_deploying_until_ready():
    assert status("running", {"": 1}, {"": 0}, 1, "pending", failed=False).phase == "deploying"


def test_running_service_losing_an_instance_is_degraded():
    assert status("running", {"": 2}, {"": 1}, 2, "running", failed=False).phase == "degraded"


def test_phase_while_stopping_and_stopped():
    assert status("stopped", {"": 0}, {"": 0}, 1, "running", failed=False).phase == "stopping"
    assert status("stopped", {"": 0}, {"": 0}, 0, "stopping", failed=False).phase == "stopped"


def test_failure_wins_over_progress():
    assert status("running", {"": 1}, {"": 0}, 0, "deploying", failed=True).phase == "failed"


PD = {"prefill": 1, "decode": 2}


def test_roles_are_planned_separately():
    result = plan("svc", Desired(PD, "h1"), [observed("svc-p-1", role="prefill")])
    assert [o.name for o in result.keep] == ["svc-p-1"]
    assert [role for role, _ in result.create] == ["decode", "decode"]
    assert all(name.startswith("svc-d-") for _, name in result.create)


def test_scaling_one_role_leaves_the_other_alone():
    running = [observed("svc-p-1", role="prefill"), observed("svc-d-1", role="decode"),
               observed("svc-d-2", role="decode")]  # fmt: skip
    result = plan("svc", Desired({"prefill": 1, "decode": 1}, "h1"), running)
    assert [o.name for o in result.remove] == ["svc-d-2"]
    assert "svc-p-1" in {o.name for o in result.keep}


def test_instances_of_a_dropped_role_are_removed():
    result = plan("svc", Desired({"": 1}, "h1"), [observed("svc-p-1", role="prefill")])
    assert [o.name for o in result.remove] == ["svc-p-1"] and len(result.create) == 1


def test_pd_service_runs_once_each_role_has_a_ready_instance():
    assert status("running", PD, {"prefill": 1, "decode": 1}, 3, "deploying", False).phase == (
        "running"
    )
    assert status("running", PD, {"prefill": 1}, 3, "deploying", False).phase == "deploying"


def test_pd_service_without_a_ready_decode_is_degraded_and_says_so():
    result = status("running", PD, {"prefill": 1, "decode": 0}, 3, "running", False)
    assert result.phase == "degraded" and "no ready decode instance" in result.progress
