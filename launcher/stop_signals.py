"""How `make run` (`manage.py up`) takes its stop signals.

Ctrl-C in a terminal (SIGINT), a service manager's SIGTERM and a closed terminal's SIGHUP
reach the whole process group of `make run`, and GNU make sends SIGTERM on to its child as
well: `up` may get two or three signals within a millisecond, during start-up, while it runs or
while it stops. However many come, everything must be stopped once and to its end.

So a stop signal interrupts nothing by itself. It is noted, and it becomes a KeyboardInterrupt
only inside an `interruptible()` block (a wait that may be given up at any point: for a part
to answer, for the engine build, for the demo, for the next supervision round), at most once
per block, or at the next `check()` between start-up steps. The steps that start something
(a process, the embedded Redis) are not interruptible, so nothing is ever started unrecorded;
and the stop runs outside any such block (`stop_begun()` makes sure), so no signal can cut it
short. A signal that arrives while nothing is interruptible waits for the step to end.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def in_finalizer(frame: FrameType | None) -> bool:
    """Whether the signal came while Python ran a finalizer (a weakref.finalize callback, a
    __del__): an exception raised there is printed and dropped, so the signal is only noted
    and the next check() (every interruptible block begins with one) acts on it."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or (
            code.co_name == "__call__" and code.co_filename.endswith("weakref.py")
        ):
            return True
        frame = frame.f_back
    return False


class StopSignals:
    """The stop signals received so far, and where they may interrupt. Not installed (the
    tests' stacks), it receives nothing and interrupts nothing."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._open = 0  # interruptible() blocks entered and not left
        self._raised = False  # a KeyboardInterrupt is on its way out of the outermost block
        self._stopping = False

    def install(self) -> None:
        """Take SIGINT, SIGTERM and SIGHUP, also when started with SIGINT ignored (a
        script's background job inherits that)."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self._open and not self._raised and not self._stopping and not in_finalizer(frame):
            self._raised = True  # the next signal, while this one unwinds, is only noted
            raise KeyboardInterrupt

    def check(self) -> None:
        """KeyboardInterrupt if a stop signal came: start-up goes no further."""
        if self.received and not self._stopping:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """A block a stop signal may end at any point (KeyboardInterrupt): only waits, never a
        step that starts something."""
        self.check()
        self._open += 1
        try:
            yield
        finally:
            self._open -= 1
            if not self._open:
                self._raised = False

    def stop_begun(self) -> None:
        """From here on every stop signal is only noted: the stop runs to its end."""
        self._stopping = True

    def stop_ended(self) -> None:
        """Everything is stopped and the process is about to exit: stop signals are ignored
        from here on. Python puts a handled signal back to its default action as it exits, so
        one that came then would kill the process and turn its exit code into death by that
        signal, after "stopped" was printed."""
        self._stopping = True
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
