import pytest

from workers.scheduling.planning import status


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


def test_pd_service_runs_once_each_role_has_a_ready_instance():
    assert status("running", PD, {"prefill": 1, "decode": 1}, 3, "deploying", False).phase == (
        "running"
    )
    assert status("running", PD, {"prefill": 1}, 3, "deploying", False).phase == "deploying"


def test_pd_service_without_a_ready_decode_is_degraded_and_says_so():
    result = status("running", PD, {"prefill": 1, "decode": 0}, 3, "running", False)
    assert result.phase == "degraded" and "no ready decode instance" in result.progress


def test_an_update_in_progress_is_updating_and_a_paused_one_says_why():
    assert status("running", {"": 1}, {"": 1}, 2, "running", False, updating=True).phase == (
        "updating"
    )
    paused = status("running", {"": 1}, {"": 0}, 2, "running", False, paused="x: exited")
    assert paused.phase == "updating" and "rollout paused: x: exited" in paused.progress


@pytest.mark.parametrize(
    ("failed", "paused", "phase", "progress"),
    [
        (
            False,
            "",
            "updating",
            "0/2 instances ready (2 of the previous version serving); rolling out",
        ),
        # A new version that cannot start pauses the rollout: the old one still serves, so
        # the service is not failed.
        (
            True,
            "x: exited",
            "updating",
            "0/2 instances ready (2 of the previous version serving); rollout paused: x: exited",
        ),
    ],
)
def test_a_rollout_shows_what_the_previous_version_still_serves(failed, paused, phase, progress):
    result = status("running", {"": 2}, {"": 0}, 3, "running", failed, updating=True,
                    paused=paused, previous=2)  # fmt: skip
    assert result.phase == phase and result.progress.startswith(progress)


def test_instances_in_back_off_are_named_in_the_progress():
    result = status("running", {"": 2}, {"": 1}, 2, "running", False,
                    notes=["svc-a exited with code 1; restarting in 20 s"])  # fmt: skip
    assert result.phase == "degraded" and "svc-a exited with code 1" in result.progress


def test_waiting_for_a_node_is_pending():
    result = status("running", {"": 1}, {}, 0, "deploying", False, waiting="node a: cordoned")
    assert result.phase == "pending" and "node a: cordoned" in result.progress


def test_a_running_service_scaling_up_stays_running_while_the_new_instances_start():
    result = status("running", {"": 3}, {"": 1}, 3, "running", failed=False, starting=2)
    assert (result.phase, result.progress) == ("running", "1/3 instances ready; 2 starting")
    # one lost and one new: not every missing instance is a new one
    lost = status("running", {"": 3}, {"": 1}, 3, "running", failed=False, starting=1)
    assert lost.phase == "degraded"
    # a deploy is not a scale-up
    fresh = status("running", {"": 2}, {"": 0}, 2, "deploying", failed=False, starting=2)
    assert fresh.phase == "deploying"
