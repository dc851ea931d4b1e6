"""Real nodes on one machine, for tests/test_fleet_nodes.py: the whole system (API, gateway, and
the stack's own worker as node `local`) plus workers started as another host would start them,
`manage.py worker --node n1 --address 127.0.0.11`, each with a fake `nvidia-smi` first on its
PATH offering the cards the test gives it. Loopback is all of 127.0.0.0/8 on Linux, so every
node has an address of its own and its instances are published or listen there.

Everything is real: processes, the database (PostgreSQL when DATABASE_URL is set), Redis, the
process runtime's engine process groups, dockerd's containers. Only the cards are made up.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import pytest

from launcher.stack import ROOT, last_lines
from tests.system import System, start_system

T = TypeVar("T")

REDIS_DATABASE = 3  # this file's own (tests/system.py uses 11 and 12)
DATABASE = "wharf_nodes_fleet"
# Names that must be unique on this machine's one dockerd (others test against it too).
RUN = secrets.token_hex(3)
# A node silent 3 s is not_ready and 3 s later its instances move; heartbeats every second.
FLEET_ENV = {
    "WHARF_NODE_HEARTBEAT": "1",
    "WHARF_NODE_GRACE": "3",
    "WHARF_NODE_EVICT": "3",
    "WHARF_RECONCILE_INTERVAL": "2",
    "WHARF_BACKOFF_BASE": "2",
    "WHARF_HEALTH_TIMEOUT": "120",
}
MARKER = "WHARF_FLEET_TEST"
CARD = "NVIDIA H100 80GB HBM3"
NOISE = re.compile(
    r"Task workers\.tasks\.|Sending due task"
)  # log lines left out of reports  # in every engine's env: finds this run's engine processes


def fake_nvidia_smi(folder: Path, cards: int) -> Path:
    """A folder holding an `nvidia-smi` that answers workers.nodes.devices' query with `cards` H100s
    (or, for none, what the real one prints on a host without cards)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        f"{i}, GPU-{folder.name}-{i:04d}, {CARD}, 81559, 0, 00000000:{24 + i:02X}:00.0"
        for i in range(cards)
    ]
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\ncat <<'EOF'\n" + ("\n".join(rows) or "No devices were found")
                      + "\nEOF\n")  # fmt: skip
    script.chmod(0o755)
    return folder


def with_path(env: dict[str, str], folder: Path) -> dict[str, str]:
    return {**env, "PATH": f"{folder}{os.pathsep}{env.get('PATH', os.defpath)}"}


def start_fleet_system(home: Path, model_dir: Path, redis_url: str) -> System:
    """tests.system.start_system's stack, with the fleet's short timings, node `local` (no
    cards: a fake nvidia-smi that finds none) and this file's database and Redis database."""
    env = with_path(dict(os.environ), fake_nvidia_smi(home / "fake-bin-local", 0))
    return start_system(
        "process", home, model_dir, redis_url,
        {"PATH": env["PATH"], **FLEET_ENV, "WHARF_NODE_NAME": "local"},
        redis_number=REDIS_DATABASE, database=DATABASE, token_name="nodes",
        # Its servers are commands on process nodes, placed by resource group (the staff's
        # grants of a fleet that trusts its one workspace).
        grants={"process_code": True,
                "resource_groups": [f"{kind}-{RUN}" for kind in ("dock", "vllm", "pd")]},
    )  # fmt: skip


@dataclass
class NodeWorker:
    name: str
    address: str
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen | None = None

    def start(self) -> None:
        argv = [sys.executable, str(ROOT / "manage.py"), "worker", "--node", self.name,
                "--address", self.address, "--labels", self.env.get("WHARF_NODE_LABELS", ""),
                "--concurrency", "2"]  # fmt: skip
        with open(self.log, "ab") as log:
            log.write(f"--- {time.strftime('%H:%M:%S')} starting {self.name}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL its whole process group: the host dies, nothing gets to clean up."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM, as an operator stops a worker; SIGKILL if it takes too long."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class Fleet:
    """The system and the extra node workers a test started (stopped by close())."""

    system: System
    workers: dict[str, NodeWorker] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.system.stack.home

    def add(self, name: str, address: str, cards: int = 0, runtime: str = "process",
            labels: str = "") -> NodeWorker:  # fmt: skip
        env = with_path(self.system.stack.env, fake_nvidia_smi(self.home / f"fake-bin-{name}",
                                                               cards))  # fmt: skip
        env.update(WHARF_RUNTIME=runtime, WHARF_NODE_LABELS=labels)
        worker = NodeWorker(name, address, env, self.home / "logs" / f"worker-{name}.log")
        worker.start()
        self.workers[name] = worker
        return worker

    def wait_ready(self, names: list[str], timeout: float = 90) -> dict[str, dict]:
        """Until each named node is `ready` in the API; their rows."""

        def ready() -> dict[str, dict] | None:
            for name in names:
                worker = self.workers.get(name)
                if worker and worker.proc and worker.proc.poll() is not None:
                    pytest.fail(f"worker {name} exited: {self.logs(name)}")
            with self.system.api() as api:
                nodes = {n["name"]: n for n in api.get("/nodes").json()}
            found = {name: nodes[name] for name in names if name in nodes}
            if len(found) == len(names) and all(n["state"] == "ready" for n in found.values()):
                return found
            return None

        return wait_for(ready, timeout, f"nodes {names} ready", self.logs)

    def logs(self, *names: str) -> str:
        """The last lines worth reading of the named parts' logs (all by default): Celery's
        line per task received and done is left out."""
        parts = names or ("api", "worker", *self.workers)
        paths = {part: self.home / "logs" / f"{part}.log" for part in parts}
        paths.update({name: self.workers[name].log for name in parts if name in self.workers})
        tails = []
        for part, path in paths.items():
            lines = [line for line in last_lines(path, 400).splitlines() if not NOISE.search(line)]
            tails.append(f"--- {part}:\n" + "\n".join(lines[-15:]))
        return "\n".join(tails)

    def close(self) -> None:
        """Stop its workers, then kill what a failed test may have left: this run's engine
        processes and its Docker nodes' containers."""
        for worker in self.workers.values():
            worker.stop()
        kill_groups({engine.pgid for engine in engines(RUN)})
        docker_nodes = [w.name for w in self.workers.values() if w.env["WHARF_RUNTIME"] == "docker"]
        if docker_nodes:
            import docker

            from workers.runtimes.docker import listed

            client = docker.from_env()
            for node in docker_nodes:
                for container in listed(client, f"wharf.node={node}"):
                    with contextlib.suppress(docker.errors.NotFound):
                        container.remove(force=True)
        self.workers.clear()


def wait_for(check: Callable[[], T | None], timeout: float, what: str,
             context: Callable[[], str] = lambda: "") -> T:  # fmt: skip
    """check()'s first truthy answer, polled twice a second; fails naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not {what} within {timeout:.0f} s\n{context()}")
        time.sleep(0.5)


@dataclass(frozen=True)
class Engine:
    """One engine process of this run, as the operating system shows it."""

    pid: int
    pgid: int
    port: int
    cuda_visible_devices: str | None


def engines(marker: str) -> list[Engine]:
    """Every live engine process whose environment carries MARKER=marker (a spec's env reaches
    its engine; zombies show an empty environment), with the port it is called at: its
    front's (gateway.front, the engine's parent, which holds the key), else its own."""
    found, fronts = [], {}
    for entry in os.listdir("/proc"):
        if not entry.isdecimal():
            continue
        try:
            raw = Path(f"/proc/{entry}/environ").read_bytes()
            args = Path(f"/proc/{entry}/cmdline").read_bytes().decode().split("\0")
            pgid = os.getpgid(int(entry))
        except (OSError, ProcessLookupError):
            continue
        env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        if env.get(MARKER.encode()) != marker.encode():
            continue
        if b"WHARF_FRONT_KEY" in env:  # the front: --listen host:port --upstream host:port
            listen, upstream = (args[args.index(flag) + 1] for flag in ("--listen", "--upstream"))
            fronts[int(upstream.rsplit(":", 1)[1])] = int(listen.rsplit(":", 1)[1])
            continue
        devices = env.get(b"CUDA_VISIBLE_DEVICES")
        found.append(Engine(int(entry), pgid, int(env[b"PORT"]),
                            devices.decode() if devices is not None else None))  # fmt: skip
    return [replace(e, port=fronts.get(e.port, e.port)) for e in found]


def kill_groups(pgids: set[int]) -> None:
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
