"""Engines see only their plan's environment, never the control plane's secrets.

An engine may be a user's own command, so what the worker was started with (the database and
Redis URLs, the token keys, object-storage credentials) must not reach it. Real processes and
a real container print the environment they got.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts.engines.plan import ContainerPlan
from tests.system import require_runtime
from workers.runtimes.base import InstanceRequest
from workers.runtimes.process import INHERITED_ENV, ProcessRuntime

# The worker's environment in these tests: each name a kind of control-plane secret.
FAKE_SECRETS = {
    "WHARF_SECRET_KEY": "fake-hmac-key",
    "WHARF_BOOTSTRAP_TOKEN": "fake-bootstrap-token",
    "WHARF_ADMIN_PASSWORD": "fake-admin-password",
    "WHARF_S3_ACCESS_KEY_ID": "fake-s3-key-id",
    "WHARF_S3_ACCESS_KEY_SECRET": "fake-s3-secret",
    "WHARF_OSS_ACCESS_KEY_SECRET": "fake-oss-secret",
    "DATABASE_URL": "postgres://wharf:fake-db-password@db/wharf",
    "REDIS_URL": "redis://:fake-redis-password@redis:6379/0",
    "CELERY_BROKER_URL": "redis://:fake-broker-password@redis:6379/1",
    "DJANGO_SETTINGS_MODULE": "controlplane.settings",
    "AWS_SECRET_ACCESS_KEY": "fake-aws-secret",
    "GITHUB_TOKEN": "fake-github-token",
    "SMTP_PASSWORD": "fake-smtp-password",
    "SIGNING_KEY": "fake-signing-key",
}
PLAN_ENV = {"ENGINE_SETTING": "from-the-plan", "VLLM_CPU_KVCACHE_SPACE": "1"}
IMAGE = "wharf/vllm-cpu:0.32.0"  # the one engine image every node with Docker has


@pytest.fixture
def worker_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in FAKE_SECRETS.items():
        monkeypatch.setenv(name, value)


def assert_no_secret(env: dict[str, str]) -> None:
    assert not set(FAKE_SECRETS) & set(env)
    leaked = [v for v in FAKE_SECRETS.values() if any(v in value for value in env.values())]
    assert not leaked


# --- local processes ---------------------------------------------------------------------------


@pytest.fixture
def process_runtime(tmp_path: Path) -> Iterator[ProcessRuntime]:
    # A stand-in engine virtualenv: the runtime only checks that its python is there.
    (tmp_path / "venv/bin").mkdir(parents=True)
    (tmp_path / "venv/bin/python").symlink_to(sys.executable)
    runtime = ProcessRuntime(str(tmp_path / "models"), tmp_path / "instances", tmp_path / "venv")
    yield runtime
    for instance in runtime.list():
        runtime.remove(instance.name)


def process_engine_env(runtime: ProcessRuntime, out: Path) -> dict[str, str]:
    """Start an engine that writes its environment to `out`; what it wrote."""
    dump = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
    args = ["sh", "-c", f'{sys.executable} -c "{dump}" {out}.tmp && mv {out}.tmp {out}; sleep 60']
    plan = ContainerPlan(image="", args=args, port=8000, env=PLAN_ENV)
    runtime.create(InstanceRequest("envtest", "envtest-1", "h", plan))
    deadline = time.monotonic() + 20
    while not out.exists():
        assert time.monotonic() < deadline, runtime.logs("envtest-1")
        time.sleep(0.1)
    return json.loads(out.read_text())


def test_process_engine_gets_its_plan_env_and_basics_but_no_worker_secret(
    worker_secrets: None, process_runtime: ProcessRuntime, tmp_path: Path
) -> None:
    env = process_engine_env(process_runtime, tmp_path / "env.json")
    assert_no_secret(env)
    assert {key: env.get(key) for key in PLAN_ENV} == PLAN_ENV
    assert env["PATH"] == f"{tmp_path}/venv/bin:{os.environ['PATH']}"
    assert env["VIRTUAL_ENV"] == str(tmp_path / "venv")
    assert env["HOME"] == os.environ["HOME"]
    # Nothing else either: the allow-listed basics, the plan's env and the runtime's own only
    # (the shell adds PWD; Python may coerce a C locale with LC_CTYPE).
    expected = INHERITED_ENV | set(PLAN_ENV) | {"VIRTUAL_ENV", "PWD"}
    assert [key for key in env if key not in expected and not key.startswith("LC_")] == []


# --- Docker containers -------------------------------------------------------------------------


def image_env_names(client: Any) -> set[str]:
    """The names the engine image sets itself; skips (fails in CI) where it was not built."""
    from docker.errors import ImageNotFound

    try:
        image = client.images.get(IMAGE)
    except ImageNotFound:
        if os.environ.get("CI"):
            pytest.fail(f"{IMAGE} is not built in CI")
        pytest.skip(f"{IMAGE} is not on this machine (make image)")
    return {entry.split("=", 1)[0] for entry in image.attrs["Config"]["Env"] or ()}


def test_container_gets_only_its_plan_env_and_its_image_env(
    worker_secrets: None, tmp_path: Path
) -> None:
    require_runtime("docker")
    from workers.runtimes.docker import DockerRuntime

    runtime = DockerRuntime(str(tmp_path / "models"), files_dir=tmp_path / "files")
    image_env = image_env_names(runtime.client)
    name = f"envtest-{uuid.uuid4().hex[:8]}-1"
    plan = ContainerPlan(image=IMAGE, args=["sh", "-c", "env"], port=8000, env=PLAN_ENV)
    try:
        runtime.create(InstanceRequest(name.removesuffix("-1"), name, "h", plan))
        assert runtime.client.containers.get(name).wait(timeout=60)["StatusCode"] == 0
        lines = runtime.logs(name, tail=1000).splitlines()
    finally:
        runtime.remove(name)
    env = dict(line.split("=", 1) for line in lines if "=" in line)
    assert_no_secret(env)
    assert {key: env.get(key) for key in PLAN_ENV} == PLAN_ENV
    # Docker adds HOSTNAME and HOME, the shell PWD; everything else is the image's or the plan's.
    assert set(env) <= image_env | set(PLAN_ENV) | {"HOSTNAME", "HOME", "PWD"}
