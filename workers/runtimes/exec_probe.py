"""EAS's exec probe (containers[].*_check.exec) in a Docker container: `docker exec` of the
command, watched until it exits or its timeout passes. Docker has no timeout of its own for
an exec, so one still running then is killed by its pid (the worker and dockerd share the
host's process namespace on a node; where they do not, it is left to end by itself and the
probe has failed all the same)."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from docker.errors import APIError, NotFound

POLL = 0.05  # seconds between looks at a running exec


def exec_probe(api, container: str, command: tuple[str, ...], timeout: float) -> bool:
    """Whether `command` exited 0 in `container` within `timeout` seconds."""
    try:
        exec_id = api.exec_create(container, list(command), stdout=False, stderr=False)["Id"]
        api.exec_start(exec_id, detach=True)
    except (NotFound, APIError):  # gone, stopped, or the program is not in the image
        return False
    deadline = time.monotonic() + timeout
    info: dict = {}
    while time.monotonic() < deadline:
        info = api.exec_inspect(exec_id)
        if not info.get("Running") and info.get("ExitCode") is not None:
            return info["ExitCode"] == 0
        time.sleep(POLL)
    if info.get("Pid"):
        with contextlib.suppress(OSError):
            os.kill(info["Pid"], signal.SIGKILL)
    return False
