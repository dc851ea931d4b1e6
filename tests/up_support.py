"""`manage.py up` (the README's `make run`) as a subprocess, the way a newcomer runs it, and a
search for anything of its stack left running afterwards."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from launcher.stack import ROOT, port_taken

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


class Up:
    """A running `manage.py up`, its output (stdout and stderr together) read as it comes."""

    def __init__(self, env: dict[str, str], *args: str, sigint_ignored: bool = False):
        """`sigint_ignored`: started as a script's background job is, SIGINT ignored."""
        self.home = Path(env["WHARF_HOME"])
        self.lines: list[str] = []
        ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "up", *args], cwd=ROOT, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
            preexec_fn=ignore,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

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
    """(pid, command line) of every process that inherited WHARF_HOME=home: the API, gateway,
    worker and embedded Redis of a stack started with that home."""
    marker = f"WHARF_HOME={home}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        if marker in environ:
            found.append((int(proc.name), cmdline.strip()))
    return found


def leftovers(home: Path, ports: tuple[int, ...] = (), services: tuple[str, ...] = ()) -> list[str]:
    """What is still running of the stack whose home is `home`: its processes (see
    stack_processes; engines no longer inherit WHARF_HOME, hence the ports and containers),
    ports still held, and Docker containers of its services."""
    found = [f"process {pid}: {cmdline}" for pid, cmdline in stack_processes(home)]
    found += [f"port {port} still in use" for port in ports if port_taken(port)]
    return found + _local_engines(home) + _containers(services)


def _local_engines(home: Path) -> list[str]:
    from workers.runtimes.process import ProcessRuntime

    runtime = ProcessRuntime("/nonexistent", home / "instances")
    return [f"engine process {i.name}" for i in runtime.list() if i.running]


def _containers(services: tuple[str, ...]) -> list[str]:
    from workers.runtimes.docker import DockerRuntime

    if not services or not DockerRuntime.available():
        return []
    runtime = DockerRuntime(model_dir="/nonexistent")
    return [f"container {i.name}" for name in services for i in runtime.list(service=name)]


def wait_gone(home: Path, timeout: float = 5, **kwargs) -> list[str]:
    """leftovers(), allowing a stopped process a moment to be reaped by its parent."""
    deadline = time.monotonic() + timeout
    while (left := leftovers(home, **kwargs)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left
