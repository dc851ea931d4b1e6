"""Process groups on this host, as the process runtime and `make run` start their children
(each in a session of its own): which still have a running member, a signal to a whole group,
and a stop that ends with SIGKILL.

A member that has exited but was not reaped (a zombie: its parent has not waited yet, or it
was orphaned to an init that never waits, as in some containers) runs nothing and holds no
port or file, so it does not count; `kill(-pgid, 0)` would count it and wait for ever."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

POLL = 0.1  # seconds between looks at /proc while waiting


def live_groups(pgids: Iterable[int]) -> set[int]:
    """Those of `pgids` that still have a member that is not a zombie (one pass over /proc)."""
    wanted, found = set(pgids), set[int]()
    if not wanted:
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # After the command's closing parenthesis: state, parent, process group, ...
        state, _, group = stat.rsplit(")", 1)[1].split()[:3]
        if state not in ("Z", "X") and int(group) in wanted:
            found.add(int(group))
    return found


def signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def wait_empty(
    pgids: Iterable[int], deadline: float, reap: Callable[[], object] = lambda: None
) -> set[int]:
    """Until no group of `pgids` has a running member or `deadline` (time.monotonic) passes;
    the groups that still have one. `reap` is called on each look (the caller's children)."""
    waiting = set(pgids)
    while True:
        reap()
        waiting = live_groups(waiting)
        if not waiting:
            reap()  # a child that ended since the reap above: reaped, not left a zombie
            return waiting
        if time.monotonic() >= deadline:
            return waiting
        time.sleep(POLL)


def stop_groups(
    pgids: Iterable[int], timeout: float, kill_wait: float = 5.0,
    reap: Callable[[], object] = lambda: None,
) -> set[int]:  # fmt: skip
    """SIGTERM every group, SIGKILL those still running after `timeout` s, and wait up to
    `kill_wait` s more; the groups that still have a running member (none, unless the kernel
    cannot end a process, e.g. one stuck in uninterruptible I/O)."""
    running = live_groups(pgids)
    for pgid in running:
        signal_group(pgid, signal.SIGTERM)
    running = wait_empty(running, time.monotonic() + timeout, reap)
    for pgid in running:
        signal_group(pgid, signal.SIGKILL)
    return wait_empty(running, time.monotonic() + kill_wait, reap)


def group_cpu_seconds(pgid: int) -> float | None:
    """CPU seconds (user + system) used by group `pgid`'s live members, with what its leader's
    reaped children used; None when the group has no member left."""
    ticks, members = 0, 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # After the command: state, ppid, pgrp, ... utime stime cutime cstime (fields 14-17).
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) != pgid:
            continue
        members += 1
        ticks += int(fields[11]) + int(fields[12])
        if int(entry.name) == pgid:
            ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK") if members else None
