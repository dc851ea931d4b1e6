"""`manage.py up` (the README's `make run`) as a subprocess, the way a newcomer runs it, and a
search for anything of its stack left running afterwards."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from launcher.management.commands.up import STOPPED
from launcher.stack import ROOT, STOP_LIMIT, port_taken

# What a newcomer's shell does not have: the test suite's own database, Redis and settings.
NOT_A_NEWCOMERS = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")


def newcomer_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment less every WHARF_* variable and the suite's services, in a fresh home."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("WHARF_") and name not in NOT_A_NEWCOMERS
    }
    return {**env, "WHARF_HOME": str(home), **extra}


# What a shell's make does not inherit: the make running pytest (`make test`), if any.
MAKE_VARIABLES = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")
PORT_VARIABLES = ("WHARF_API_PORT", "WHARF_GATEWAY_PORT")


class Up:
    """A running `manage.py up`, its output (stdout and stderr together) read as it comes."""

    def __init__(self, env: dict[str, str], *args: str, sigint_ignored: bool = False,
                 command: list[str] | None = None):  # fmt: skip
        """`sigint_ignored`: started as a script's background job is, SIGINT ignored.
        `command`: what runs instead of `manage.py up ARGS` (see make_run)."""
        self.home = Path(env["WHARF_HOME"])
        self.ports: tuple[int, ...] = ()  # the API's and gateway's, where known
        self.lines: list[str] = []
        ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
        self.proc = subprocess.Popen(
            command or [sys.executable, str(ROOT / "manage.py"), "up", *args], cwd=ROOT, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
            preexec_fn=ignore, start_new_session=command is not None,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @classmethod
    def make_run(cls, env: dict[str, str], *make_args: str) -> Up:
        """`make run` as a shell runs a job: a process group of its own (make, `manage.py up`
        and whatever they leave in it), which a terminal's Ctrl-C or a service manager signals
        as a whole (signal_group)."""
        env = {name: value for name, value in env.items() if name not in MAKE_VARIABLES}
        run = cls(env, command=["make", "--no-print-directory", "run", *make_args])
        run.ports = tuple(int(env[name]) for name in PORT_VARIABLES if name in env)
        return run

    def signal_group(self, signum: int) -> None:
        os.killpg(self.proc.pid, signum)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        """The first line matching pattern; fails with the output if up exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if found := re.search(pattern, line):
                    return found
            if self.proc.poll() is not None:
                self._reader.join(5)
                raise AssertionError(f"up exited {self.proc.returncode}:\n{self.output}")
            time.sleep(0.2)
        raise AssertionError(f"no line matching {pattern!r} in {timeout} s:\n{self.output}")

    def finish(self, timeout: float = 120) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def stop(self, timeout: float = 120, signum: int = signal.SIGTERM) -> int:
        """SIGTERM, as a service manager sends it (or `signum`); the exit code."""
        self.proc.send_signal(signum)
        return self.finish(timeout)


def stack_processes(home: Path) -> list[tuple[int, str]]:
    """(pid, command line) of every running process that inherited WHARF_HOME=home (`up`, the
    API, gateway and worker of a stack started with that home) or works in home (its embedded
    Redis, whose process title overwrites its environment)."""
    marker, workdir = f"WHARF_HOME={home}".encode(), os.path.realpath(home)
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:  # gone meanwhile, a zombie, or a kernel thread
            continue
        if marker in environ or cwd == workdir:
            found.append((int(proc.name), cmdline.strip()))
    return found


def leftovers(home: Path, ports: tuple[int, ...] = (), services: tuple[str, ...] = ()) -> list[str]:
    """What is still running of the stack whose home is `home`: its processes (see
    stack_processes; engines no longer inherit WHARF_HOME, hence the ports and containers),
    ports still held, and Docker containers of its services."""
    found = [f"process {pid}: {cmdline}" for pid, cmdline in stack_processes(home)]
    found += [f"port {port} still in use" for port in ports if port_taken(port)]
    return found + _local_engines(home) + _containers(home, services)


def _local_engines(home: Path) -> list[str]:
    from workers.runtimes.process import ProcessRuntime

    runtime = ProcessRuntime("/nonexistent", home / "instances")
    return [f"engine process {i.name}" for i in runtime.list() if i.running]


def _containers(home: Path, services: tuple[str, ...]) -> list[str]:
    """Containers of `services` that read from `home` (its model store or cache): another
    stack's `demo` on the same Docker daemon is not this one's."""
    from workers.runtimes.docker import DockerRuntime

    if not services or not DockerRuntime.available():
        return []
    runtime = DockerRuntime(model_dir="/nonexistent")
    within = os.path.realpath(home) + os.sep
    return [f"container {i.name}" for name in services for i in runtime.list(service=name)
            if any(os.path.realpath(p).startswith(within) for p in i.paths or ())]  # fmt: skip


def end_everything(home: Path, services: tuple[str, ...] = ()) -> None:
    """What a failed test left of the stack whose home is `home`, ended: its processes (by
    pid), its engine processes and its containers of `services`."""
    from workers.runtimes.docker import DockerRuntime
    from workers.runtimes.process import ProcessRuntime

    for pid, _ in stack_processes(home):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    engines = ProcessRuntime("/nonexistent", home / "instances")
    for instance in engines.list():
        engines.remove(instance.name)
    if services and DockerRuntime.available():
        runtime = DockerRuntime(model_dir="/nonexistent")
        for found in _containers(home, services):
            runtime.remove(found.removeprefix("container "))


def wait_gone(home: Path, timeout: float = 5, **kwargs) -> list[str]:
    """leftovers(), allowing a stopped process a moment to be reaped by its parent."""
    deadline = time.monotonic() + timeout
    while (left := leftovers(home, **kwargs)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


SLACK = 5.0  # seconds for make and Python beyond the stop's own limit
ENGINE_LIMIT = 25.0  # an engine's stop: its runtime's SIGTERM wait, then SIGKILL
DEMO_STOP_LIMIT = STOP_LIMIT + ENGINE_LIMIT + SLACK  # a stack whose demo engine runs


def assert_stopped(run: Up, signalled_at: float, limit: float, services=()) -> None:
    """make exits within the stop's limit, nothing of the stack is left once it has, and
    "stopped" was printed (unless `up` was ended before it took signals)."""
    run.finish(limit + 60)
    took = time.monotonic() - signalled_at
    context = f"after {took:.1f} s:\n{run.output}"
    assert leftovers(run.home, ports=run.ports, services=services) == [], context
    assert took < limit, context
    if "==> checks" in run.output:  # `up` takes stop signals from before that line on
        assert STOPPED in run.output and "Traceback" not in run.output, context
    if "==> starting API" in run.output:
        assert "==> stopping" in run.output, context
