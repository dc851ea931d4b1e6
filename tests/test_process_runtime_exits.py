"""A local process instance's exit is reported with its code (or its signal), even when the
worker started other processes in between (device discovery, the next engine): subprocess
reaps the children of Popen objects it no longer sees, which used to leave the runtime
nothing to report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.engines.plan import ContainerPlan
from workers.runtimes.base import InstanceRequest
from workers.runtimes.process import ProcessRuntime


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ProcessRuntime]:
    runtime = ProcessRuntime(str(tmp_path / "models"), tmp_path / "instances")
    yield runtime
    for instance in runtime.list():
        runtime.remove(instance.name)


def start(runtime: ProcessRuntime, name: str, shell: str) -> int:
    plan = ContainerPlan(image="", args=["/bin/sh", "-c", shell], port=1)
    runtime.create(InstanceRequest("exits", name, "h", plan))
    return json.loads((runtime.state_dir / f"{name}.json").read_text())["pid"]


def exited(runtime: ProcessRuntime, name: str):
    deadline = time.monotonic() + 10
    while True:
        (observed,) = [o for o in runtime.list() if o.name == name]
        if not observed.running or time.monotonic() > deadline:
            return observed
        time.sleep(0.05)


def test_an_exit_code_survives_other_processes_started_meanwhile(runtime):
    start(runtime, "exits-1", "exit 3")
    time.sleep(0.3)
    subprocess.run(["true"], check=True)  # what reaped the engine before
    assert exited(runtime, "exits-1").exit_code == 3
    assert exited(runtime, "exits-1").exit_code == 3  # and on every look after


def test_a_killed_engine_reports_its_signal(runtime):
    pid = start(runtime, "exits-2", "exec sleep 60")
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.3)
    subprocess.run(["true"], check=True)
    assert exited(runtime, "exits-2").exit_code == -signal.SIGKILL
    runtime.remove("exits-2")
    assert runtime.list() == []
