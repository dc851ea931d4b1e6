"""The processes of one simulated fleet, each started as production starts it: the API
(uvicorn), the control-plane workers (`manage.py worker`, Celery with its beat: the scheduler,
placement, rollout and autoscaler code), a gateway (`python -m gateway`) and the simulated
nodes (benchmarks.fleet_sim.nodes, a few processes). Their CPU time is read from /proc, per
role, so that the simulator's own CPU stays out of the control plane's figure."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from benchmarks.fleet_sim.nodes import LABELS
from benchmarks.harness import every_stat, stat

REPO = Path(__file__).resolve().parents[2]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(check: Callable[[], object], seconds: float, what: str, every: float = 0.2):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if found := check():
                return found
        except (httpx.TransportError, OSError):
            pass
        time.sleep(every)
    raise TimeoutError(f"not {what} within {seconds:g} s")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of these processes and every process in their sessions (Celery's
    embedded beat, uvicorn's children), from /proc."""
    sessions = set(pids)
    # Fields 6 (the session id), 14 and 15 (utime and stime) of proc(5).
    ticks = sum(int(f[11]) + int(f[12]) for f in every_stat() if int(f[3]) in sessions)
    return ticks / CLOCK_TICKS


def database_cpu_seconds() -> float:
    """CPU of this machine's PostgreSQL processes (`postgres`), each with its reaped
    children's: the server's share, whoever it serves."""
    ticks = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with suppress(OSError):
                if (entry / "comm").read_text().strip() == "postgres":
                    f = stat(entry.name)  # fields 14 to 17 of proc(5): utime stime cutime cstime
                    ticks += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return ticks / CLOCK_TICKS


def machine_ticks() -> tuple[int, int]:
    """This machine's busy and total CPU ticks so far, all cores (the first line of
    /proc/stat: user nice system idle iowait irq softirq steal; idle and iowait are not busy)."""
    with open("/proc/stat") as machine:
        ticks = [int(t) for t in machine.readline().split()[1:9]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def private_redis(folder: Path) -> tuple[subprocess.Popen, str]:
    """A Redis server of the run's own (redis-server on a free port, nothing saved), so that
    its INFO counts only the fleet's commands, not those of others sharing a server."""
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
         "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    wait_for(lambda: socket.create_connection(("127.0.0.1", port), timeout=1), 15, "Redis up")
    return server, url


@dataclass
class Options:
    nodes: int = 500
    cards: int = 8
    start_delay: float = 1.0  # seconds from an engine's creation to its readiness
    agent_interval: float = 2.0
    node_processes: int = 0  # 0: one per 100 nodes
    workers: int = 1  # control-plane workers (each with its beat: one leads)
    api_processes: int = 2  # as the README's sizing advises (the Kubernetes base runs two)
    worker_concurrency: int = 4
    env: dict[str, str] = field(default_factory=dict)  # the control plane's settings


@dataclass
class Stack:
    """Every process of the fleet; stop() ends them all (process groups of their own)."""

    options: Options
    env: dict[str, str]
    logs: Path
    api_url: str = ""
    gateway_url: str = ""
    control: dict[str, list[subprocess.Popen]] = field(default_factory=dict)

    def _start(self, role: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.logs / f"{role}-{len(self.control.get(role, []))}.log").open("ab")
        process = subprocess.Popen(
            argv, cwd=REPO, env={**self.env, **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self.control.setdefault(role, []).append(process)

    def start_control_plane(self) -> None:
        port = free_port()
        self.api_url = f"http://127.0.0.1:{port}"
        self._start("api", [sys.executable, "-m", "uvicorn", "controlplane.asgi:application",
                            "--host", "127.0.0.1", "--port", str(port),
                            "--workers", str(self.options.api_processes),
                            "--no-access-log"])  # fmt: skip
        for i in range(self.options.workers):
            self._start("worker", [sys.executable, "manage.py", "worker", "--node",
                                   f"fleetsim-control-{i}", "--address", "127.0.0.1",
                                   "--labels", "role=control", "--concurrency",
                                   str(self.options.worker_concurrency)])  # fmt: skip
        gateway_port = free_port()
        self.gateway_url = f"http://127.0.0.1:{gateway_port}"
        self._start("gateway", [sys.executable, "-m", "gateway", "--host", "127.0.0.1",
                                "--port", str(gateway_port)])  # fmt: skip
        wait_for(lambda: httpx.get(f"{self.api_url}/healthz", timeout=2).is_success, 60, "API up")
        wait_for(lambda: httpx.get(f"{self.gateway_url}/healthz", timeout=2).is_success, 60,
                 "gateway up")  # fmt: skip

    def start_nodes(self) -> None:
        count = self.options.nodes
        processes = self.options.node_processes or max(1, (count + 99) // 100)
        share = (count + processes - 1) // processes
        for first in range(0, count, share):
            self._start("nodes", [sys.executable, "-m", "benchmarks.fleet_sim.nodes",
                                  "--first", str(first), "--count", str(min(share, count - first)),
                                  "--cards", str(self.options.cards),
                                  "--delay", str(self.options.start_delay),
                                  "--interval", str(self.options.agent_interval)],
                        {"WHARF_NODE_LABELS": LABELS})  # fmt: skip

    def cpu(self, roles: tuple[str, ...] = ("api", "worker")) -> float:
        return cpu_seconds([p.pid for role in roles for p in self.control.get(role, [])])

    def check_alive(self) -> None:
        for role, processes in self.control.items():
            for process in processes:
                if process.poll() is not None:
                    raise RuntimeError(f"the {role} process exited ({process.returncode}); "
                                       f"see {self.logs}")  # fmt: skip

    def stop(self) -> None:
        stop_all([p for processes in self.control.values() for p in processes])


def stop_all(processes: list[subprocess.Popen], grace: float = 15) -> None:
    """SIGTERM to each one's process group, SIGKILL to those still running after `grace` s."""
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
