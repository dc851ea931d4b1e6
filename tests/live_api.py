"""A real API process for tests that need one apart from the test process: `uvicorn
controlplane.asgi` as production starts it, on the test database (or another address of it),
with the suite's Redis and keys. Killed with -9 or stopped with SIGTERM, as the test needs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from django.conf import settings as django_settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url(host: str | None = None, port: int | None = None) -> str:
    """The test database's URL, at another address if given (a forwarder in front of it)."""
    db = connection.settings_dict
    host, port = host or db["HOST"] or "127.0.0.1", port or db["PORT"] or 5432
    return f"postgresql://{db['USER']}:{db['PASSWORD']}@{host}:{port}/{db['NAME']}"


class LiveApi:
    """An API process on a free port of loopback; `url` once it answers /healthz (unless
    `wait` is false: a test that starts it with the database away)."""

    def __init__(self, redis_url: str, home: Path, db_url: str | None = None,
                 wait: bool = True) -> None:  # fmt: skip
        self.url = f"http://127.0.0.1:{free_port()}"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url,
               "DATABASE_URL": db_url or database_url(), "WHARF_HOME": str(home),
               "WHARF_SECRET_KEY": django_settings.SECRET_KEY,
               "WHARF_TOKEN_KEY": django_settings.WHARF_TOKEN_KEY}  # fmt: skip
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host",
             "127.0.0.1", "--port", self.url.rsplit(":", 1)[1], "--no-access-log"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        if wait:
            self.wait_healthy()

    def wait_healthy(self, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "the API exited"
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2, trust_env=False).is_success:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the API at {self.url} did not answer within {seconds:g} s")

    def kill(self) -> None:
        """SIGKILL: no clean stop, as a host that dies."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(15)
