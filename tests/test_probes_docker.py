"""EAS's container probes on the Docker runtime, passing and failing on a real engine
container behind its real front container, with the real starter and node agent: an
http_get probe of a port published nowhere reaches it through the front in the engine's
network namespace; exec runs in the engine container (and is killed at its timeout);
readiness routes and unroutes, liveness restarts."""

from __future__ import annotations

import io
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.services.choices import InstanceState
from tests.api_support import grant
from tests.probes_support import SERVER, placed, state, until

docker = pytest.importorskip("docker")
pytestmark = [pytest.mark.django_db, pytest.mark.timeout(240)]

BASE = "wharf/wharf:0.1.0"  # setup's image: Python, and the front the branch changes
IMAGE = "wharf-test/eas-probes:1"  # the base with this checkout's front and a test engine
ROOT = Path(__file__).resolve().parents[1]
NODE = "eas-probes"
FAST = {"initial_delay_seconds": 0, "period_seconds": 1, "timeout_seconds": 1}
READY, STARTING = InstanceState.READY, InstanceState.STARTING


def _context() -> bytes:
    """A build context: the base image, this checkout's front, the engine script."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        files = {
            "Dockerfile": f"FROM {BASE}\nCOPY front.py /opt/wharf/app/gateway/front.py\n"
            "COPY engine_front.py /opt/wharf/app/contracts/engine_front.py\n"
            "COPY server.py /opt/probe/server.py\n",
            "front.py": (ROOT / "gateway/front.py").read_text(),
            "engine_front.py": (ROOT / "contracts/engine_front.py").read_text(),
            "server.py": SERVER,
        }
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    try:
        client = docker.from_env(timeout=5)
        client.images.get(BASE)
    except Exception as exc:  # no daemon, or setup has not built Wharf's image
        pytest.skip(f"needs dockerd and {BASE}: {exc}")
    client.images.build(fileobj=io.BytesIO(_context()), custom_context=True, tag=IMAGE, rm=True)
    yield IMAGE
    client.images.remove(IMAGE, force=True)


@pytest.fixture
def runtime(image, tmp_path, settings):
    from workers.runtimes.docker import DockerRuntime

    grant(process_code=True)
    found = DockerRuntime(str(tmp_path / "models"), node=NODE, front_image=image,
                          files_dir=tmp_path / "files")  # fmt: skip
    yield found
    for instance in found.list():
        found.remove(instance.name)
        found.forget(instance.service)
    shutil.rmtree(tmp_path, ignore_errors=True)


def engine(name: str, **probes) -> dict:
    return {"name": f"eas-probes-{name}", "containers": [{
        "image": IMAGE, "port": 8000, "command": "exec python /opt/probe/server.py",
        "env": [{"name": "FLAGS", "value": "/tmp"}, {"name": "EXTRA_PORT", "value": "9000"}],
        **probes,
    }], "metadata": {"termination_grace_period": 1}}  # fmt: skip


def in_engine(runtime, row, *command: str) -> None:
    assert runtime.client.containers.get(row.name).exec_run(list(command)).exit_code == 0


def test_an_http_probe_reaches_an_unpublished_port_through_the_front(runtime):
    row = placed(engine("http", readiness_check={
        "http_get": {"path": "/health", "port": 9000}, **FAST}), node=NODE)  # fmt: skip
    row = until(runtime, row, lambda r: r.state == STARTING and r.probe_failures >= 2,
                timeout=60, node=NODE)  # fmt: skip
    container = runtime.client.containers.get(row.name)
    assert not (container.attrs["NetworkSettings"]["Ports"] or {}).get("9000/tcp")  # unpublished
    in_engine(runtime, row, "touch", "/tmp/healthy")  # /health answers 200 from now on
    until(runtime, row, state(READY), node=NODE)


def test_an_exec_readiness_probe_runs_in_the_engine_container(runtime):
    check = {"exec": {"command": ["/bin/sh", "-c", "test -f /tmp/ready"]}, **FAST,
             "failure_threshold": 2}  # fmt: skip
    row = placed(engine("exec", readiness_check=check), node=NODE)
    row = until(runtime, row, lambda r: r.state == STARTING and r.probe_failures >= 2,
                timeout=60, node=NODE)  # fmt: skip
    in_engine(runtime, row, "touch", "/tmp/ready")
    until(runtime, row, state(READY), node=NODE)
    in_engine(runtime, row, "rm", "/tmp/ready")
    row = until(runtime, row, state(InstanceState.UNHEALTHY), node=NODE)
    assert row.restarts == 0 and runtime.list()[0].running  # out of routing, still running


def test_a_failing_exec_liveness_probe_restarts_the_engine(runtime):
    live = {"exec": {"command": ["/bin/sh", "-c", "test ! -f /tmp/dead"]}, **FAST,
            "failure_threshold": 2}  # fmt: skip
    row = placed(engine("live", liveness_check=live), node=NODE)
    row = until(runtime, row, state(READY), timeout=60, node=NODE)
    in_engine(runtime, row, "touch", "/tmp/dead")
    row = until(runtime, row, state(InstanceState.BACKOFF), node=NODE)
    assert "liveness check failed 2 times" in row.message and runtime.list() == []


def test_an_exec_startup_probe_past_its_timeout_fails_the_start(runtime):
    slow = {"exec": {"command": ["sleep", "30"]}, **FAST, "failure_threshold": 2}
    row = placed(engine("slow", startup_check=slow), node=NODE)
    row = until(runtime, row, state(InstanceState.BACKOFF), timeout=60, node=NODE)
    assert "not ready within 2 s (its startup check" in row.message
