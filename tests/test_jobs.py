"""EAS's elastic jobs (metadata.workload_type: elasticjob; contracts.spec_job): the spec takes
the field, a job's ends are decided by workers.nodes.jobs.outcome, its phase by
workers.scheduling.planning.job_status, and the rollout planner never replaces a succeeded instance.
Pure: the node and the scheduler acting on them are tests/test_jobs_fleet.py (in memory) and
tests/test_jobs_process.py (real processes)."""

from __future__ import annotations

import pytest

from contracts.engines.plan import ContainerPlan
from contracts.spec import SpecError, parse_spec
from contracts.spec_job import is_job
from contracts.spec_rules import runtime_checks
from workers.nodes.jobs import Outcome, outcome
from workers.runtimes.base import InstanceRequest
from workers.runtimes.docker import run_options
from workers.scheduling import planning, rollout

SPEC = {"name": "export", "containers": [{"image": "img", "command": "python export.py",
        "port": 8000}], "metadata": {"instance": 2, "workload_type": "elasticjob"}}  # fmt: skip


def test_a_job_is_taken_and_known():
    assert is_job(parse_spec(SPEC))
    assert not is_job(parse_spec({**SPEC, "metadata": {"instance": 2}}))
    assert not is_job(None)


@pytest.mark.parametrize("kind", ["ScalableJob", "job", "", 1])
def test_only_elasticjob_is_a_workload_type(kind):
    with pytest.raises(SpecError) as caught:
        parse_spec({**SPEC, "metadata": {"workload_type": kind}})
    assert "metadata.workload_type" in caught.value.errors


def test_a_spec_without_the_field_hashes_as_before_and_a_job_differs():  # main's hash
    plain = {**SPEC, "metadata": {"instance": 2}}
    with_none = {**SPEC, "metadata": {"instance": 2, "workload_type": None}}
    assert parse_spec(plain).spec_hash() == parse_spec(with_none).spec_hash() == "0dbd4bf2bc28"
    assert parse_spec(plain).spec_hash() != parse_spec(SPEC).spec_hash()


@pytest.mark.parametrize(("runtime", "refused"), [
    ("docker", False), ("process", False), ("", False), ("kubernetes", True),
])  # fmt: skip
def test_kubernetes_refuses_a_job_by_name(runtime, refused):
    errors = runtime_checks(parse_spec(SPEC), runtime)
    assert ("metadata.workload_type" in errors) is refused


# (exit code, retries spent, limit, outcome)
ENDS = [
    (0, 0, 3, Outcome.SUCCEEDED),
    (0, 3, 3, Outcome.SUCCEEDED),  # a last retry that succeeds has succeeded
    (1, 0, 3, Outcome.RETRY),
    (137, 2, 3, Outcome.RETRY),
    (None, 0, 3, Outcome.RETRY),  # gone without an exit code: a failure like any other
    (1, 3, 3, Outcome.FAILED),
    (2, 0, 0, Outcome.FAILED),  # WHARF_JOB_RETRIES=0: no retry at all
]


@pytest.mark.parametrize(("code", "retries", "limit", "expected"), ENDS)
def test_an_ended_run_of_a_job(code, retries, limit, expected):
    assert outcome(code, retries, limit) is expected


# (wanted, succeeded, running, failed, waiting, phase, progress)
PHASES = [
    (2, 2, 0, False, None, "completed", "2/2 instances succeeded"),
    (2, 1, 1, False, None, "running", "1/2 instances succeeded; 1 running"),
    (2, 0, 2, False, None, "running", "0/2 instances succeeded; 2 running"),
    (2, 0, 0, False, None, "deploying", "0/2 instances succeeded; starting"),
    (2, 1, 0, False, "no node fits: n1: 1 gpu short", "pending",
     "1/2 instances succeeded; waiting: no node fits: n1: 1 gpu short"),
    (2, 1, 0, True, None, "failed", "1/2 instances succeeded"),
    (0, 0, 0, False, None, "completed", "0/0 instances succeeded"),
]  # fmt: skip


@pytest.mark.parametrize(("wanted", "succeeded", "running", "failed", "waiting", "phase",
                          "progress"), PHASES)  # fmt: skip
def test_a_job_phase_from_its_counts(wanted, succeeded, running, failed, waiting, phase, progress):
    status = planning.job_status(wanted, succeeded, running, failed, waiting)
    assert (status.phase, status.progress) == (phase, progress)


def test_a_job_phase_names_instances_in_back_off():
    status = planning.job_status(1, 0, 0, False, notes=["export-1 exited with code 1; restart 1"])
    assert (status.phase, status.progress) == (
        "running",
        "0/1 instances succeeded; export-1 exited with code 1; restart 1",
    )


def member(name: str, state: str, spec_hash: str = "new") -> rollout.Member:
    return rollout.Member(name=name, spec_hash=spec_hash, state=state)


# (replicas, members, what is created, what is drained)
STEPS = [
    (2, [member("a", "succeeded"), member("b", "succeeded")], 0, ()),  # done: nothing more
    (2, [member("a", "succeeded"), member("b", "starting")], 0, ()),
    (2, [member("a", "succeeded")], 1, ()),  # scaled up: one more run
    (1, [member("a", "succeeded"), member("b", "succeeded")], 0, ("b",)),
    (1, [member("a", "succeeded", "old")], 1, ("a",)),  # updated: it runs again
]


@pytest.mark.parametrize(("replicas", "members", "create", "drain"), STEPS)
def test_a_succeeded_instance_counts_and_is_never_replaced(replicas, members, create, drain):
    step = rollout.step(replicas, "new", members)
    assert (step.create, step.drain, step.paused) == (create, drain, "")


@pytest.mark.parametrize(("run_to_end", "policy", "ports"), [
    (True, {"Name": "no"}, {}),
    (False, {"Name": "on-failure", "MaximumRetryCount": 5}, {"8000/tcp": ("127.0.0.1", None)}),
])  # fmt: skip
def test_docker_never_restarts_nor_publishes_a_job_engine(tmp_path, run_to_end, policy, ports):
    plan = ContainerPlan("img", ["python", "export.py"], 8000)
    request = InstanceRequest("export", "export-1", "h", plan, run_to_end=run_to_end)
    options = run_options(request, model_dir=str(tmp_path), bind_address="127.0.0.1")
    assert (options["restart_policy"], options["ports"]) == (policy, ports)
