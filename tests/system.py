"""Start the whole system (launcher.stack) for a test, on a runtime of the test's choice.

The database is PostgreSQL when DATABASE_URL is set (a fresh database per stack, a copy of
one migrated once per run), else SQLite under the stack's home; Redis is the test Redis, on a
database of its own.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from launcher.stack import ROOT, Stack

REDIS_DB = {"docker": 11, "process": 12}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def docker_available() -> bool:
    from workers.runtimes.docker import DockerRuntime

    return DockerRuntime.available()


def require_runtime(runtime: str) -> None:
    """Skip on a developer machine without Docker; CI must have every runtime."""
    if runtime == "docker" and not docker_available():
        if os.environ.get("CI"):
            pytest.fail("dockerd is not reachable in CI; .ci/run should have started it")
        pytest.skip("no Docker daemon here")


def fresh_database(name: str, template: str = "") -> str:
    """A new PostgreSQL database beside DATABASE_URL's, empty or a copy of `template`; '' for
    SQLite."""
    url = os.environ.get("DATABASE_URL", "")
    if not url:
        return ""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


_MIGRATED: dict[str, str] = {}  # DATABASE_URL -> its migrated template, made once per run


def migrated_database(name: str, env: dict[str, str]) -> str:
    """A fresh database `name` beside DATABASE_URL's with every migration applied, copied from
    one migrated once per test run (a `manage.py migrate` takes about 7 s here, a copy well
    under one); '' for SQLite, which the caller migrates itself."""
    url = os.environ.get("DATABASE_URL", "")
    if not url:
        return ""
    if url not in _MIGRATED:
        template = urlsplit(url).path.strip("/") + "_migrated"
        migrate({**env, "DATABASE_URL": fresh_database(template)})
        _MIGRATED[url] = template
    return fresh_database(name, template=_MIGRATED[url])


def migrate(env: dict[str, str]) -> None:
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v0"], env=env,
                   check=True, cwd=ROOT)  # fmt: skip


def redis_db(redis_url: str, db: int) -> str:
    if redis_url.startswith("unix://"):
        return f"{redis_url.split('?')[0]}?db={db}"
    parts = urlsplit(redis_url)
    return urlunsplit(parts._replace(path=f"/{db}"))


@dataclass
class System:
    stack: Stack
    runtime: str
    admin_token: str

    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.stack.api_url}/api/v1",
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=30,
        )

    def engine(self, instance: dict) -> httpx.Client:
        """A client of an instance's engine, through its front with its engine key (as the
        stack's gateways and worker call it)."""
        from contracts.engine_keys import engine_key

        key = engine_key(self.stack.env["WHARF_SECRET_KEY"].encode(), instance["name"])
        return httpx.Client(base_url=instance["url"], timeout=10, trust_env=False,
                            headers={"Authorization": f"Bearer {key}"})  # fmt: skip

    def instances(self):
        """The stack's runtime, as its worker sees it (to list and remove instances)."""
        from workers.runtimes.docker import DockerRuntime
        from workers.runtimes.process import ProcessRuntime

        if self.runtime == "docker":
            return DockerRuntime(model_dir="/nonexistent")
        return ProcessRuntime("/nonexistent", self.stack.home / "instances")

    def remove_instances(self) -> None:
        """Whatever instances the stack still runs. Local processes: every one under its home
        (services being deleted included); containers: those of the services it lists (the
        daemon is shared with other stacks)."""
        runtime = self.instances()
        if self.runtime == "process":
            found = runtime.list()
        else:
            with self.api() as api:
                names = [s["name"] for s in api.get("/services").json()]
            found = [i for name in names for i in runtime.list(service=name)]
        for instance in found:
            runtime.remove(instance.name)

    def wait_phase(self, name: str, phases: set[str], timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        with self.api() as api:
            while time.monotonic() < deadline:
                response = api.get(f"/services/{name}")
                if response.status_code == 200:
                    body = response.json()
                else:  # a 404 from the delete request on; its events last until it is gone
                    gone = api.get(f"/services/{name}/events").status_code == 404
                    body = {"phase": "gone" if gone else "deleting"}
                # The phase as of the latest intent: right after an update the status still
                # describes the previous generation until the scheduler's next pass.
                current = body.get("observed_generation", 0) >= body.get("generation", 0)
                if body["phase"] in phases and current:
                    return body
                time.sleep(1)
            events = api.get(f"/services/{name}/events").json()
        pytest.fail(f"{name} not in {phases} after {timeout} s; events: {events}")


def start_system(
    runtime: str,
    home: Path,
    model_dir: Path,
    redis_url: str,
    extra_env: dict[str, str],
    *,
    redis_number: int | None = None,
    database: str | None = None,
    token_name: str = "e2e",
    grants: dict | None = None,
) -> System:
    """A whole stack for a test. `extra_env` wins over the defaults here. A suite that runs
    beside others gives its own Redis database number (emptied first: what a killed earlier
    run left) and PostgreSQL database name. `grants`: what staff grant the default workspace
    (contracts.grants), through the API, before the test deploys anything."""
    url = redis_db(redis_url, REDIS_DB[runtime] if redis_number is None else redis_number)
    if redis_number is not None:
        import redis

        with redis.Redis.from_url(url) as client:
            client.flushdb()
    env = dict(os.environ)
    env.update(
        WHARF_HOME=str(home),
        WHARF_RUNTIME=runtime,
        WHARF_MODEL_DIR=str(model_dir),
        WHARF_SECRET_KEY=secrets.token_urlsafe(32),
        WHARF_RECONCILE_INTERVAL="5",
        REDIS_URL=url,
        DJANGO_SETTINGS_MODULE="controlplane.settings",
    )
    env.update(extra_env)
    env["DATABASE_URL"] = migrated_database(database or f"wharf_e2e_{runtime}", env)
    if not env["DATABASE_URL"]:
        migrate(env)
    # The admin's token is made while the parts start (each a Django import, about 2 s).
    minting = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "create_api_token", "--name", token_name],
        env=dict(env), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    stack = Stack(home=home, env=env, api_port=free_port(), gateway_port=free_port())
    try:
        stack.start_redis()
        stack.start()
    finally:
        token, error = minting.communicate(timeout=120)
    if minting.returncode:
        stack.stop()
        pytest.fail(f"create_api_token failed: {error}")
    system = System(stack=stack, runtime=runtime, admin_token=token.strip())
    if grants:
        with system.api() as api:
            answer = api.put("/workspaces/default/grants", json=grants)
            assert answer.status_code == 200, answer.text
    return system
