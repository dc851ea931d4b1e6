"""`python -m workers.nodes.rank_tables`, the init container that holds a rank-table pod's engine
back until its tables are complete and list it: against real files, and as a process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workers.nodes.rank_tables import state, wait

ROOT = Path(__file__).resolve().parents[1]


def write(folder: Path, status: str, *pods: str) -> None:
    """As the kubelet updates a ConfigMap volume: the new files appear at once."""
    for pod in pods:
        (folder / f"{pod}.json").write_text(json.dumps({"status": status}))
    (folder / "global.json").write_text(json.dumps({"status": status, "server_group_list": []}))


@pytest.mark.parametrize(("files", "expected"), [
    (None, "no global.json in {folder} yet"),
    (("initializing",), "the rank tables are initializing"),
    (("completed", "other-pod"), "the rank tables do not list pod me yet"),
    (("completed", "me"), ""),
])  # fmt: skip
def test_state(tmp_path, files, expected):
    if files:
        write(tmp_path, *files)
    assert state(tmp_path, "me") == expected.format(folder=tmp_path)


def test_an_unreadable_table_is_waited_for(tmp_path):
    (tmp_path / "global.json").write_text("{half")
    assert state(tmp_path, "me").startswith("global.json cannot be read yet")
    (tmp_path / "global.json").write_text("[]")
    assert state(tmp_path, "me") == "the rank tables are unreadable"


def test_wait_says_what_it_waits_for_when_it_changes_and_returns_once_listed(tmp_path):
    said: list[str] = []
    now = [0.0]
    steps = iter([
        lambda: None,  # still nothing, 20 s on: not said again
        lambda: None,  # 40 s on: said again
        lambda: write(tmp_path, "initializing"),
        lambda: None,
        lambda: write(tmp_path, "completed", "me"),
    ])  # fmt: skip

    def sleep(seconds: float) -> None:
        now[0] += 20
        next(steps)()

    wait(tmp_path, "me", say=said.append, clock=lambda: now[0], sleep=sleep)
    assert said == [
        f"waiting: no global.json in {tmp_path} yet",
        f"waiting: no global.json in {tmp_path} yet",  # said again after 30 s
        "waiting: the rank tables are initializing",
        "the rank tables list pod me",
    ]


def run(folder: Path, pod: str = "me") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "workers.nodes.rank_tables", "--folder", str(folder), "--pod", pod,
         "--poll", "0.05"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def wait_for_line(process: subprocess.Popen, text: str) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if text in line:
            return
    raise AssertionError(f"no line with {text!r}")


def test_the_init_container_exits_0_once_the_tables_list_its_pod(tmp_path):
    write(tmp_path, "completed", "someone-else")
    process = run(tmp_path)
    try:
        wait_for_line(process, "waiting: the rank tables do not list pod me yet")
        assert process.poll() is None
        write(tmp_path, "completed", "someone-else", "me")
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert "the rank tables list pod me" in out


def test_sigterm_ends_the_wait_at_once(tmp_path):
    process = run(tmp_path)
    try:
        wait_for_line(process, "waiting:")
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 143
