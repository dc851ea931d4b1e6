"""`make run` stopped the way people and machines stop it: a signal to its whole process group
(a terminal's Ctrl-C, a service manager's SIGTERM, a closed terminal's SIGHUP), which GNU make
passes on to `manage.py up` once more (SIGTERM); two signals 10 ms apart; a signal at any
moment of start-up, and one during the stop itself. Each time, once make has exited, nothing
of the stack is left (no process, no listener on its ports, no engine) and "stopped" was
printed if `up` got as far as taking signals.

One run in four left the stack running before: the cheap cases (start-up, and up without the
demo, `UP_FLAGS=--no-demo`) are repeated within one test each. A group's SIGTERM once the
demo serves is the newcomer's (tests/browser/test_first_run.py), where the demo comes up."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import pytest

from launcher.stack import ROOT, STOP_LIMIT
from tests.system import free_port
from tests.up_support import (
    DEMO_STOP_LIMIT,
    MAKE_VARIABLES,
    SLACK,
    Up,
    assert_stopped,
    end_everything,
    newcomer_env,
)

pytestmark = pytest.mark.timeout(900)

UP = r"^Press Ctrl-C to stop\.$"


@pytest.fixture(scope="module", autouse=True)
def make_is_ready():
    """`make run` installs first (pip, npm) when its prerequisites are not up to date; these
    tests time the stop, not an install."""
    env = {name: value for name, value in os.environ.items() if name not in MAKE_VARIABLES}
    if subprocess.run(["make", "-q", "venv", "console"], cwd=ROOT, env=env).returncode:
        pytest.fail("`make run` would install first: run `make venv console`, then the tests")


@pytest.fixture
def runs(tmp_path):
    """Starts `make run` in a fresh WHARF_HOME on free ports; afterwards ends whatever a
    failed test left running, by pid (so later tests find the machine as it was)."""
    started: list[Up] = []

    def start(*make_args: str) -> Up:
        ports = {"WHARF_API_PORT": str(free_port()), "WHARF_GATEWAY_PORT": str(free_port())}
        home = tmp_path / f"wharf-{len(started)}"
        run = Up.make_run(newcomer_env(home, **ports), *make_args)
        started.append(run)
        return run

    yield start
    for run in started:
        if run.proc.poll() is None:
            run.signal_group(signal.SIGKILL)
        end_everything(run.home, services=("demo",))


@pytest.mark.parametrize(
    ("signum", "rounds"), [(signal.SIGTERM, 4), (signal.SIGINT, 2), (signal.SIGHUP, 2)],
    ids=["SIGTERM", "SIGINT", "SIGHUP"],
)  # fmt: skip
def test_a_signal_to_the_group_of_make_run_once_up_stops_everything(runs, signum, rounds):
    """Every other round, a second signal comes while it stops."""
    for round_ in range(rounds):
        run = runs("UP_FLAGS=--no-demo")
        run.wait_for(UP, timeout=240)
        signalled_at = time.monotonic()
        run.signal_group(signum)
        if round_ % 2:
            run.wait_for(r"^==> stopping$", timeout=30)
            run.signal_group(signal.SIGTERM)
        assert_stopped(run, signalled_at, STOP_LIMIT + SLACK)


def test_two_signals_10_ms_apart_at_any_moment_of_start_up_stop_everything(runs):
    """From make's own start to the demo's deploy, seeded: the moment each round chose is in
    the failure's message."""
    pairs = [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT, signal.SIGTERM),
             (signal.SIGTERM, signal.SIGHUP), (signal.SIGHUP, signal.SIGINT)]  # fmt: skip
    moments = random.Random(33)
    for first, second in pairs:
        run = runs()
        delay = moments.uniform(0.3, 5.0)
        time.sleep(delay)
        signalled_at = time.monotonic()
        run.signal_group(first)
        time.sleep(0.01)
        run.signal_group(second)
        print(f"signals {first.name}, {second.name} after {delay:.2f} s")
        assert_stopped(run, signalled_at, DEMO_STOP_LIMIT, services=("demo",))
