"""A local instance with several containers (contracts.engines.sidecars) as one process group:
this supervisor starts the main container's command and each sidecar's as its children, in
its own process group (the instance's: the process runtime signals the whole group), and when
any of them ends, stops the others and exits with that one's code, so that the instance is
seen to have exited and restarts whole (the agent's back-off).

    python -I process_pod.py --sidecars FILE -- main command ...

FILE is JSON, [{"index": 1, "args": [...], "env": {...}}, ...]: each sidecar's command line
and whole environment (the process runtime builds it: the worker's basics and the sidecar's
own env, never the main container's). The main command gets this process's environment.
It imports the standard library only and runs as a script (`-I`: nothing from its folder
or the user's site shadows it), so the node's Python runs it as is. It must run in a process
group of the instance's own (the process runtime starts it, or the front that starts it, in
a session of its own): stopping the instance's processes signals that whole group.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STOP_TIMEOUT = 10.0  # seconds the others have to end after SIGTERM, then SIGKILL
POLL = 0.1  # seconds between looks at /proc while they end


def exit_status(code: int) -> int:
    """A child's return code as a shell reports it (a signal N: 128 + N)."""
    return code if code >= 0 else 128 - code


def first_to_end(children: dict[int, str]) -> tuple[str, int]:
    """Wait until one of `children` ({pid: what it is}) ends: (what, its exit status)."""
    while True:
        pid, status = os.wait()
        if pid in children:
            return children[pid], exit_status(os.waitstatus_to_exitcode(status))


def stop(procs: list[subprocess.Popen], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM to the instance's whole process group (the children, theirs, and a front,
    which waits for this one to end), and SIGKILL to what of it outlives `timeout`, but this
    process and its parent: an engine's own children (vLLM's engine core and, in its
    multiprocess layout, its worker) are grandchildren, and take their time."""
    os.killpg(os.getpgrp(), signal.SIGTERM)  # this one ignores it (main)
    deadline = time.monotonic() + timeout
    while others() and time.monotonic() < deadline:
        for proc in procs:
            proc.poll()  # reaped: an ended child is no member any more
        time.sleep(POLL)
    for pid in others():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for proc in procs:
        proc.wait()


def others() -> list[int]:
    """The running members of this process's group but itself and its parent (a front)."""
    group, mine = os.getpgrp(), {os.getpid(), os.getppid()}
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        state, _, pgid = stat.rsplit(")", 1)[1].split()[:3]
        if state not in ("Z", "X") and int(pgid) == group:
            found.append(int(entry.name))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="process_pod.py", description=__doc__)
    parser.add_argument("--sidecars", required=True, help="the sidecars' JSON file")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the main command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    with open(args.sidecars) as given:
        sidecars = json.load(given)
    # A SIGTERM to the group reaches every child too: the supervisor waits for them.
    signal.signal(signal.SIGTERM, lambda *_: None)
    procs = [subprocess.Popen(command, stdin=subprocess.DEVNULL)]
    children = {procs[0].pid: "containers[0]"}
    for sidecar in sidecars:
        try:
            proc = subprocess.Popen(sidecar["args"], env=sidecar["env"], stdin=subprocess.DEVNULL)
        except OSError as exc:
            print(f"wharf: containers[{sidecar['index']}] did not start: {exc}", file=sys.stderr)
            stop(procs)
            return 127
        procs.append(proc)
        children[proc.pid] = f"containers[{sidecar['index']}]"
    what, status = first_to_end(children)
    print(f"wharf: {what} exited with status {status}; stopping the instance", file=sys.stderr)
    stop(procs)
    return status


if __name__ == "__main__":
    sys.exit(main())
