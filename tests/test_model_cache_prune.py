"""Pruning the model cache: which host paths instances use (docker, process), and the
periodic task that prunes a node's cache with them (workers.tasks.prune_model_cache).

The runtimes run for real: a local process, a container created (not started) by dockerd,
and a Celery worker consuming its node's queue from the test Redis.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from contracts.engines.plan import ContainerPlan
from contracts.object_store import ObjectSource
from tests.docker_support import empty_image
from tests.moto_support import KEY_ID, SECRET, Moto
from tests.system import redis_db
from workers import tasks
from workers.celery import NODE_QUEUE, app, consume_node_queue
from workers.models.storage import stage
from workers.runtimes import get_runtime
from workers.runtimes.base import InstanceRequest
from workers.runtimes.docker import bind_sources
from workers.runtimes.process import ProcessRuntime

ROOT = Path(__file__).resolve().parent.parent
HOUR_AGO = time.time() - 3700
SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


def _backdate(*folders: Path) -> None:
    """As if staged more than an hour ago: old enough for prune's min_age."""
    for folder in folders:
        os.utime(folder, (HOUR_AGO, HOUR_AGO))


def _fake_versions(cache: Path, count: int) -> list[Path]:
    """Version folders of one source, oldest first (prune orders them by mtime)."""
    folders = []
    for n in range(count):
        folder = cache / f"bucket-m-0123456789abcdef@{n:016x}"
        (folder / "config.json").parent.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        stamp = HOUR_AGO - 100 * (count - n)
        os.utime(folder, (stamp, stamp))
        folders.append(folder)
    return folders


# --- what instances report --------------------------------------------------------------------


def test_bind_sources_are_the_host_paths_of_binds_only() -> None:
    attrs = {
        "Mounts": [
            {"Type": "bind", "Source": "/cache/m@1", "Destination": "/models/m"},
            {"Type": "volume", "Name": "wharf-kv-x", "Source": "/var/lib/docker/volumes/x"},
            {"Type": "tmpfs", "Source": "", "Destination": "/dev/shm"},
            {"Type": "bind", "Source": "/cache/m@1", "Destination": "/again"},
        ]
    }
    assert bind_sources(attrs) == ("/cache/m@1",)
    assert bind_sources({"Mounts": None}) == bind_sources({}) == ()


@pytest.fixture
def process_runtime(tmp_path: Path) -> Any:
    runtime = ProcessRuntime(str(tmp_path / "models"), tmp_path / "instances")
    yield runtime
    for instance in runtime.list():
        runtime.remove(instance.name)


def _start(runtime: ProcessRuntime, name: str, args: list[str], paths: tuple[str, ...]) -> Any:
    plan = ContainerPlan(image="", args=args, port=8000)
    return runtime.create(InstanceRequest("svc", name, "h", plan, paths=paths))


def test_process_instances_report_the_folders_they_were_created_with(
    process_runtime: ProcessRuntime, tmp_path: Path
) -> None:
    main, draft = (str(tmp_path / f"cache/{n}@1") for n in ("main", "draft"))
    created = _start(process_runtime, "svc-1", [*SLEEP, "--model", main], (main, draft))

    (listed,) = process_runtime.list()
    assert listed.running
    for observed in (created, listed):
        assert observed.paths == (main, draft)

    # Exited, but still there (the runtime has not removed it): still reported.
    os.killpg(json.loads((tmp_path / "instances/svc-1.json").read_text())["pid"], 9)
    deadline = time.monotonic() + 10
    while process_runtime.list()[0].running and time.monotonic() < deadline:
        time.sleep(0.1)
    (stopped,) = process_runtime.list()
    assert not stopped.running and stopped.paths == (main, draft)


def test_process_state_from_before_paths_were_recorded_reports_them_unknown(
    process_runtime: ProcessRuntime, tmp_path: Path
) -> None:
    _start(process_runtime, "svc-1", SLEEP, (str(tmp_path / "cache/main@1"),))
    state_path = tmp_path / "instances/svc-1.json"
    state = json.loads(state_path.read_text())
    del state["paths"]
    state_path.write_text(json.dumps(state))

    (observed,) = process_runtime.list()
    assert observed.running and observed.paths is None


def test_unreadable_process_state_folder_is_an_error_not_an_empty_node(tmp_path: Path) -> None:
    assert ProcessRuntime("/m", tmp_path / "never-created").list() == []
    (tmp_path / "not-a-folder").write_text("")
    with pytest.raises(OSError):
        ProcessRuntime("/m", tmp_path / "not-a-folder").list()


def test_docker_instances_report_their_bind_sources_running_or_not(tmp_path: Path) -> None:
    from workers.runtimes.docker import DockerRuntime

    if not DockerRuntime.available():
        pytest.skip("no Docker daemon here")
    from docker.types import Mount

    runtime = DockerRuntime(str(tmp_path / "models"))
    (tmp_path / "cache/m@1").mkdir(parents=True)
    (tmp_path / "files").mkdir()
    service = f"prune-{uuid.uuid4().hex[:8]}"
    container = runtime.client.containers.create(
        empty_image(runtime.client),
        ["serve"],
        name=f"{service}-1",
        labels={"wharf.service": service, "wharf.instance": f"{service}-1", "wharf.port": "8000"},
        mounts=[
            Mount("/models/m", str(tmp_path / "cache/m@1"), type="bind", read_only=True),
            Mount("/etc/wharf", str(tmp_path / "files"), type="bind", read_only=True),
            Mount("/scratch", None, type="tmpfs"),
        ],
    )
    try:
        (observed,) = runtime.list(service=service)
        # Created, never started: it may still start, so its binds count.
        assert not observed.running
        binds = sorted([str(tmp_path / "cache/m@1"), str(tmp_path / "files")])
        assert observed.paths == tuple(binds)
    finally:
        container.remove(force=True)


# --- the task ---------------------------------------------------------------------------------


def _use_runtime(settings: Any, choice: str) -> None:
    """This node's runtime as the product chooses it (workers.runtimes.get_runtime)."""
    settings.WHARF_RUNTIME = choice
    get_runtime.cache_clear()


@pytest.fixture
def node(tmp_path: Path, settings: Any) -> Iterator[ProcessRuntime]:
    """This node: its cache in tmp_path, its instances local processes."""
    settings.WHARF_CACHE_DIR = tmp_path / "cache"
    settings.WHARF_MODEL_DIR = tmp_path / "models"
    settings.WHARF_INSTANCE_LOG_DIR = tmp_path / "instances"
    _use_runtime(settings, "process")
    runtime = get_runtime()
    assert isinstance(runtime, ProcessRuntime)
    yield runtime
    for instance in runtime.list():
        runtime.remove(instance.name)
    get_runtime.cache_clear()


def test_task_prunes_versions_no_instance_uses(
    node: ProcessRuntime, moto: Moto, s3: Any, tmp_path: Path
) -> None:
    bucket = f"wharf-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    source = ObjectSource(f"s3://{bucket}/m/", moto.url, KEY_ID, SECRET)
    cache = tmp_path / "cache"
    versions = []
    for n in range(3):
        s3.put_object(Bucket=bucket, Key="m/config.json", Body=b'{"v": %d}' % n)
        versions.append(stage(source, cache))
        time.sleep(0.01)  # distinct mtimes: prune keeps the newest
    v0, v1, v2 = versions
    # An instance started on v0 and stopped since: it still counts.
    _start(node, "svc-1", [sys.executable, "-c", "pass"], (str(v0),))

    assert tasks.prune_model_cache() == []  # all three staged moments ago
    _backdate(v0, v1)
    os.utime(v2)  # v2 was the one staged last
    assert tasks.prune_model_cache() == [str(v1)]
    assert v0.is_dir() and v2.is_dir() and not v1.exists()

    node.remove("svc-1")
    assert tasks.prune_model_cache() == [str(v0)]
    assert sorted(p.name for p in cache.iterdir() if p.is_dir()) == [v2.name]


def test_task_prunes_nothing_when_instances_cannot_be_listed(
    node: ProcessRuntime, tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    versions = _fake_versions(tmp_path / "cache", 3)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    _use_runtime(settings, "docker")  # a real Docker client at a dead socket
    assert tasks.prune_model_cache() == []
    assert all(v.is_dir() for v in versions)

    # The same cache with a runtime that answers: the older two go.
    _use_runtime(settings, "process")
    assert sorted(tasks.prune_model_cache()) == [str(v) for v in versions[:2]]


def test_task_prunes_nothing_while_an_instance_has_unrecorded_paths(
    node: ProcessRuntime, tmp_path: Path
) -> None:
    versions = _fake_versions(tmp_path / "cache", 2)
    _start(node, "svc-1", SLEEP, ())
    state_path = tmp_path / "instances/svc-1.json"
    state = json.loads(state_path.read_text())
    del state["paths"]
    state_path.write_text(json.dumps(state))
    assert tasks.prune_model_cache() == []
    node.remove("svc-1")
    assert tasks.prune_model_cache() == [str(versions[0])]


def test_auto_chosen_process_runtime_does_not_prune_while_docker_answers(
    node: ProcessRuntime, tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.runtimes.docker import DockerRuntime

    if not DockerRuntime.available():
        pytest.skip("no Docker daemon here")
    versions = _fake_versions(tmp_path / "cache", 2)
    settings.WHARF_RUNTIME = ""
    assert tasks.prune_model_cache() == []  # dockerd answers: containers may use the cache
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    assert tasks.prune_model_cache() == [str(versions[0])]


# --- routing: each node prunes its own cache ---------------------------------------------------


def test_every_worker_consumes_its_node_queue_also_when_narrowed_with_q() -> None:
    for narrowed in (False, True):
        fresh = Celery("t", set_as_current=False)
        if narrowed:
            fresh.amqp.queues.select(["celery"])
        consume_node_queue(sender="w@h", instance=type("W", (), {"app": fresh})())
        assert NODE_QUEUE in fresh.amqp.queues.consume_from
    entry = app.conf.beat_schedule["prune-model-cache"]
    assert entry["task"] == tasks.prune_model_cache.name
    assert entry["options"]["queue"] == NODE_QUEUE


def test_a_worker_prunes_its_node_cache_from_its_node_queue(redis_url: str, tmp_path: Path) -> None:
    """A real worker, told to consume some other queue only (-Q), still takes the prune that
    beat sends to this node's queue, and prunes this node's cache."""
    broker = redis_db(redis_url, 14)
    cache = tmp_path / "cache"
    old, newest = _fake_versions(cache, 2)
    env = {
        **os.environ,
        "REDIS_URL": broker,
        "WHARF_HOME": str(tmp_path / "home"),
        "WHARF_CACHE_DIR": str(cache),
        "WHARF_RUNTIME": "process",
    }
    env.pop("CELERY_BROKER_URL", None)
    env.pop("DATABASE_URL", None)
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "workers.celery", "worker",
             "-Q", "wharf-test-elsewhere", "--pool", "solo", "--loglevel", "info",
             "-n", f"prune-test-{uuid.uuid4().hex[:6]}@%h"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while " ready." not in log.read_text():
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        from controlplane.settings import _broker_url

        sender = Celery("sender", broker=_broker_url(broker), set_as_current=False)
        entry = app.conf.beat_schedule["prune-model-cache"]
        sender.send_task(entry["task"], **entry["options"])
        deadline = time.monotonic() + 30
        while old.exists():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert newest.is_dir()
        assert f"removed 1 version(s) no instance uses: {old.name}" in log.read_text()
    finally:
        worker.terminate()
        worker.wait(timeout=30)
