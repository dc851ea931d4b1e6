"""Limits by default, on a real dockerd: a service's container, rendered and created the way a
worker does (its settings, get_runtime, contracts.engines.render, DockerRuntime.create), is
bounded in memory, CPU and tasks, gains no privilege and holds no capability, and its memory
empty_dir has a size; the kernel enforces what `docker inspect` shows. A real vLLM CPU engine
serves within Wharf's default limits."""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from contracts.engines import render
from contracts.spec import parse_spec
from controlplane.services.tiny_model import write_tiny_model
from tests.system import require_runtime
from workers.runtimes import get_runtime
from workers.runtimes.base import InstanceRequest

IMAGE = "wharf/vllm-cpu:0.32.0"  # the one engine image every node with Docker has
MIB = 1024**2
OPERATOR = {"WHARF_DEFAULT_MEMORY_MB": 512, "WHARF_DEFAULT_CPUS": 1.0, "WHARF_PIDS_LIMIT": 128,
            "WHARF_MEMORY_EMPTY_DIR_MAX_MB": 64}  # fmt: skip


def sleeper(**metadata) -> dict:
    """A custom engine that only sleeps (and stops at once), with a memory empty_dir that names
    no size."""
    command = "trap 'exit 0' TERM; sleep 600 & wait"
    return {
        "name": f"limits-{uuid.uuid4().hex[:8]}",
        "containers": [{"image": IMAGE, "command": command, "port": 8000}],
        "storage": [{"mount_path": "/scratch", "empty_dir": {"medium": "memory"}}],
        **({"metadata": metadata} if metadata else {}),
    }


@dataclass
class DockerNode:
    """This machine as a worker with the Docker runtime, under the test's settings."""

    settings: Any
    created: list[str] = field(default_factory=list)

    def runtime(self, **operator: float) -> Any:
        """The worker's runtime (get_runtime), with these operator settings."""
        for name, value in operator.items():
            setattr(self.settings, name, value)
        get_runtime.cache_clear()
        return get_runtime()

    def start(self, data: dict, key: str = "", **operator: float) -> Any:
        """The service's one instance, as a worker renders and creates it (with engine key
        `key`: behind its front); its container."""
        runtime = self.runtime(**operator)
        name = f"{data['name']}-1"
        plan = render(parse_spec(data), runtime.placement())
        self.created.append(name)
        runtime.create(InstanceRequest(data["name"], name, "h", plan, engine_key=key))
        return runtime.client.containers.get(name)


@pytest.fixture
def node(settings, tmp_path) -> Iterator[DockerNode]:
    require_runtime("docker")
    from docker.errors import ImageNotFound

    settings.WHARF_RUNTIME = "docker"
    settings.WHARF_MODEL_DIR = tmp_path / "models"
    settings.WHARF_INSTANCE_LOG_DIR = tmp_path / "files"
    found = DockerNode(settings)
    runtime = found.runtime()
    try:
        runtime.client.images.get(IMAGE)
    except ImageNotFound:
        if os.environ.get("CI"):
            pytest.fail(f"{IMAGE} is not built in CI")
        pytest.skip(f"{IMAGE} is not on this machine (make engines)")
    yield found
    for name in found.created:
        runtime.remove(name)
    get_runtime.cache_clear()


def inside(container, command: str) -> str:
    """What `command` prints in the container (an exec runs under its bounds)."""
    code, out = container.exec_run(["sh", "-c", command])
    return out.decode(errors="replace")


def cgroup(container, v1: str, v2: str) -> str:
    """A cgroup file of the container, where the host's cgroup version keeps it."""
    return inside(container, f"cat /sys/fs/cgroup/{v1} 2>/dev/null || cat /sys/fs/cgroup/{v2}")


def test_a_container_gets_the_operators_defaults_where_the_spec_names_none(node):
    host = node.start(sleeper(), **OPERATOR).attrs["HostConfig"]
    assert (host["Memory"], host["MemorySwap"]) == (512 * MIB, 512 * MIB)
    assert (host["NanoCpus"], host["PidsLimit"]) == (10**9, 128)
    assert (host["SecurityOpt"], host["CapDrop"], host["CapAdd"]) == (
        ["no-new-privileges"], ["ALL"], None
    )  # fmt: skip
    (tmpfs,) = [m for m in host["Mounts"] if m["Target"] == "/scratch"]
    assert (tmpfs["Type"], tmpfs["TmpfsOptions"]["SizeBytes"]) == ("tmpfs", 64 * MIB)


def test_the_specs_memory_and_cpu_override_the_defaults(node):
    host = node.start(sleeper(cpu=0.5, memory=1500), **OPERATOR).attrs["HostConfig"]
    assert (host["Memory"], host["NanoCpus"], host["PidsLimit"]) == (1500 * MIB, 5 * 10**8, 128)


def test_wharfs_own_defaults_where_the_operator_set_none(node):
    container = node.start(sleeper())
    host = container.attrs["HostConfig"]
    cpus = min(8, container.client.info()["NCPU"])  # dockerd refuses more than it has
    assert (host["Memory"], host["NanoCpus"], host["PidsLimit"]) == (
        16384 * MIB, cpus * 10**9, 4096
    )  # fmt: skip
    (tmpfs,) = [m for m in host["Mounts"] if m["Target"] == "/scratch"]
    assert tmpfs["TmpfsOptions"]["SizeBytes"] == 8192 * MIB


def test_the_kernel_enforces_the_bounds_inside_the_container(node):
    container = node.start(sleeper(), **OPERATOR)
    status = inside(container, "cat /proc/1/status")
    assert re.search(r"^CapEff:\s+0+$", status, re.M), status  # not one capability
    assert re.search(r"^NoNewPrivs:\s+1$", status, re.M), status
    assert cgroup(container, "pids/pids.max", "pids.max").strip() == "128"
    memory = cgroup(container, "memory/memory.limit_in_bytes", "memory.max")
    assert memory.strip() == str(512 * MIB)
    assert re.search(r" /scratch tmpfs \S*size=65536k", inside(container, "cat /proc/mounts"))
    # A fork bomb stops at the pids limit.
    out = inside(container, "for i in $(seq 200); do sleep 30 & done; echo started")
    assert "fork" in out.lower(), out
    assert len(container.top(ps_args="-eL")["Processes"]) <= 128  # threads, seen from the host


def test_an_engine_with_no_sigterm_handler_stops_on_sigterm_not_at_the_grace(node):
    """The kernel ignores a signal PID 1 has no handler for: under Docker's init the engine is
    not PID 1, so the runtime's stop ends it by SIGTERM (143), not by the SIGKILL ten seconds
    later (137)."""
    data = {"name": f"limits-{uuid.uuid4().hex[:8]}",
            "containers": [{"image": IMAGE, "port": 8000,
                            "command": "exec python3 -m http.server 8000"}]}  # fmt: skip
    container = node.start(data)
    assert container.attrs["HostConfig"]["Init"] is True
    since = int(time.time())
    node.runtime().remove(container.name)
    died = container.client.events(since=since, until=int(time.time()) + 1, decode=True,
                                   filters={"container": container.id, "event": "die"})  # fmt: skip
    (event,) = list(died)
    assert event["Actor"]["Attributes"]["exitCode"] == "143", event


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_a_real_vllm_cpu_engine_serves_within_the_default_limits(node):
    write_tiny_model(node.settings.WHARF_MODEL_DIR / "tiny-llama")
    data = {"name": f"limits-vllm-{uuid.uuid4().hex[:6]}",
            "llm": {"engine": "vllm-cpu", "model": "tiny-llama", "max_model_len": 512,
                    "max_num_seqs": 4},
            "metadata": {"shm_size": 1}}  # fmt: skip
    container = node.start(data)
    container.reload()
    port = container.attrs["NetworkSettings"]["Ports"]["8000/tcp"][0]["HostPort"]
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        container.reload()
        assert container.status == "running", container.logs(tail=50).decode()
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(2)
    else:
        pytest.fail(f"not ready: {container.logs(tail=50).decode()}")
    (model,) = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
    body = {"model": model["id"], "prompt": "Hello", "max_tokens": 8}
    response = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    tasks = int(cgroup(container, "pids/pids.current", "pids.current"))
    assert container.attrs["HostConfig"]["PidsLimit"] == 4096 and tasks < 1024, tasks
