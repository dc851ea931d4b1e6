"""The pieces `make run` stops with, one behaviour each: where a stop signal may interrupt
(launcher.stop_signals) and how a process group is ended and seen gone
(workers.runtimes.process_groups). tests/test_make_run.py stops the whole thing through make."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from launcher.stop_signals import STOP_SIGNALS, StopSignals
from workers.runtimes import process_groups


@pytest.fixture
def signals():
    """StopSignals installed in this process; the previous handlers put back afterwards."""
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    taken = StopSignals()
    taken.install()
    yield taken
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def send(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.01)  # the handler runs at the next bytecode boundary


def test_a_signal_outside_a_wait_is_only_noted_until_start_up_checks(signals):
    send(signal.SIGTERM)
    assert signals.received == [signal.SIGTERM]
    with pytest.raises(KeyboardInterrupt):
        signals.check()


def test_a_signal_ends_an_interruptible_wait(signals):
    with pytest.raises(KeyboardInterrupt), signals.interruptible():
        send(signal.SIGINT)
        pytest.fail("the wait went on")


def test_an_interruptible_block_entered_after_a_signal_ends_at_once(signals):
    send(signal.SIGHUP)
    with pytest.raises(KeyboardInterrupt), signals.interruptible():
        pytest.fail("the block ran")


def test_a_second_signal_while_the_first_unwinds_does_not_interrupt_the_cleanup(signals):
    """What make does with SIGTERM: the same signal again, a moment later."""
    cleaned = False
    with pytest.raises(KeyboardInterrupt), signals.interruptible():
        try:
            send(signal.SIGTERM)
        finally:
            send(signal.SIGTERM)  # inside the block still, while the first one unwinds
            cleaned = True
    assert cleaned and signals.received == [signal.SIGTERM, signal.SIGTERM]


def test_nothing_interrupts_once_the_stop_has_begun(signals):
    signals.stop_begun()
    with signals.interruptible():
        send(signal.SIGTERM)
        send(signal.SIGINT)
    signals.check()
    assert signals.received == [signal.SIGTERM, signal.SIGINT]


def test_stop_signals_are_taken_also_when_started_with_sigint_ignored():
    code = ("import os, signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "from launcher.stop_signals import StopSignals\n"
            "s = StopSignals(); s.install()\n"
            "try:\n"
            "    with s.interruptible(): os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\n"
            "except KeyboardInterrupt: print('stopped')")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "stopped", done.stderr


def test_a_signal_while_it_exits_after_the_stop_does_not_change_its_exit_code():
    """Python puts a handled signal back to its default action as it exits: a stop signal
    that came then (a second Ctrl-C, make's SIGTERM) would kill it after "stopped" was
    printed. Signals are sent without pause from "stopped" until it is gone, three times."""
    code = ("import time\nfrom launcher.stop_signals import StopSignals\n"
            "s = StopSignals(); s.install(); s.stop_begun()\n"
            "s.stop_ended(); print('stopped', flush=True); time.sleep(0.2)")  # fmt: skip
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "stopped"
        while proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGINT)
            time.sleep(0.0005)
        assert proc.wait() == 0


def group_of(script: str) -> subprocess.Popen:
    """A shell in a process group of its own running `script`."""
    return subprocess.Popen(["bash", "-c", script], start_new_session=True)


def test_a_group_whose_members_only_await_reaping_counts_as_gone():
    """An orphan's zombie stays when init does not reap (some containers): not running."""
    leader = group_of("sleep 0.2 & exit 0")
    leader.wait()
    deadline = time.monotonic() + 5
    assert process_groups.wait_empty([leader.pid], deadline) == set()


def test_a_group_that_ignores_sigterm_is_killed_after_the_timeout():
    leader = group_of("trap '' TERM; sleep 60 & wait")
    time.sleep(0.3)  # the trap is set
    started = time.monotonic()
    assert process_groups.stop_groups([leader.pid], 1.0, 5.0, reap=leader.poll) == set()
    assert 1.0 <= time.monotonic() - started < 5.0
    assert leader.returncode == -signal.SIGKILL


def test_a_group_that_exits_on_sigterm_is_not_waited_for():
    leader = group_of("sleep 60 & wait")
    time.sleep(0.2)
    started = time.monotonic()
    assert process_groups.stop_groups([leader.pid], 20.0, reap=leader.poll) == set()
    assert time.monotonic() - started < 5.0


def test_a_signal_during_a_finalizer_is_noted_not_raised_into_it():
    """Raised inside a weakref.finalize callback, the interrupt would be printed as
    'Exception ignored' and lost; it waits for the next check() instead."""
    import weakref

    from launcher.stop_signals import StopSignals

    signals = StopSignals()
    seen: list[str] = []

    class Owner:
        pass

    def cleanup() -> None:
        import sys

        try:
            signals._on_signal(signal.SIGTERM, sys._getframe())
            seen.append("noted")
        except KeyboardInterrupt:
            seen.append("raised")

    with pytest.raises(KeyboardInterrupt), signals.interruptible():
        owner = Owner()
        weakref.finalize(owner, cleanup)
        del owner  # the finalizer runs now, inside the block
        assert seen == ["noted"]
        signals.check()
