"""Several containers in one instance on the Docker runtime, with real containers behind the
real front, the real starter and node agent: the main container answers, at the instance's
url with its engine key, what it fetched from its sidecar on localhost (the sidecar joined
its network namespace and publishes nothing); when the sidecar exits the instance restarts
whole, saying which container ended; removing it removes every container of it; a sidecar
Docker cannot start leaves nothing of the instance."""

from __future__ import annotations

import io
import shutil
import tarfile
from collections.abc import Iterator

import pytest
from django.utils import timezone

from contracts.engines import render
from contracts.engines.plan import Placement
from contracts.spec import parse_spec
from controlplane.services.choices import InstanceState
from tests.api_support import grant
from tests.probes_support import front_get, history, placed, state, until
from workers.runtimes.base import InstanceError, InstanceRequest
from workers.runtimes.docker_sidecars import LABEL_SIDECAR

docker = pytest.importorskip("docker")
pytestmark = [pytest.mark.django_db, pytest.mark.timeout(240)]

BASE = "wharf/wharf:0.1.0"  # setup's image: Python, and Wharf's front
IMAGE = "wharf-test/eas-sidecars:1"  # the base with the two test servers
NODE = "eas-sidecars"
MAIN = r"""
import os, urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"main saw: " + urllib.request.urlopen("http://localhost:8001/", timeout=5).read()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
HTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
"""
SIDE = r"""
import os
from http.server import BaseHTTPRequestHandler, HTTPServer
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{os.environ['GREETING']} (MARK={os.environ.get('MARK', '')})".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", 8001), Handler).serve_forever()
"""


def _context() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        files = {"Dockerfile": f"FROM {BASE}\nCOPY main.py side.py /opt/pod/\n",
                 "main.py": MAIN, "side.py": SIDE}  # fmt: skip
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

    grant()
    found = DockerRuntime(str(tmp_path / "models"), node=NODE, front_image=BASE,
                          files_dir=tmp_path / "files")  # fmt: skip
    yield found
    for instance in found.list():
        found.remove(instance.name)
        found.forget(instance.service)
    shutil.rmtree(tmp_path, ignore_errors=True)


SPEC = {"name": "eas-sidecars", "containers": [
    {"image": IMAGE, "port": 8000, "command": "exec python /opt/pod/main.py",
     "env": [{"name": "MARK", "value": "main"}],
     # Ready once the sidecar answers: its port, probed through the main one's front.
     "readiness_check": {"http_get": {"path": "/", "port": 8001},
                         "initial_delay_seconds": 0, "period_seconds": 1}},
    {"image": IMAGE, "port": 8001, "command": "exec python /opt/pod/side.py",
     "env": [{"name": "GREETING", "value": "hello from the sidecar"}]},
], "metadata": {"termination_grace_period": 1}}  # fmt: skip


def test_an_instance_serves_through_its_sidecar_and_restarts_whole(runtime):
    row = until(runtime, placed(SPEC, node=NODE), state(InstanceState.READY), timeout=90,
                node=NODE)  # fmt: skip
    assert front_get(row) == "main saw: hello from the sidecar (MARK=)"  # its own env
    main = runtime.client.containers.get(row.name)
    side = runtime.client.containers.get(f"{row.name}-c1")
    assert side.attrs["HostConfig"]["NetworkMode"] == f"container:{main.id}"
    assert side.labels[LABEL_SIDECAR] == row.name and not side.attrs["NetworkSettings"]["Ports"]
    assert [o.name for o in runtime.list()] == [row.name]  # one instance, not two
    side.exec_run(["sh", "-c", "echo side-says-hi > /proc/1/fd/1"])
    assert "==> containers[1] <==\nside-says-hi" in runtime.logs(row.name)
    main_cpu, side_cpu = runtime._cpu(row.name), runtime._cpu(f"{row.name}-c1")
    assert main_cpu and side_cpu  # each only grows: a total read after both holds both
    assert runtime.cpu_seconds(row.name) >= main_cpu + side_cpu
    side.kill()
    row = until(runtime, row, state(InstanceState.BACKOFF), node=NODE)
    assert "containers[1] exited with code 137" in row.message, history(row)
    type(row).objects.filter(pk=row.pk).update(restart_at=timezone.now())
    row = until(runtime, row, state(InstanceState.READY), timeout=90, node=NODE)
    assert row.restarts == 1 and front_get(row).startswith("main saw: hello")
    assert runtime.client.containers.get(f"{row.name}-c1").id != side.id  # a new one
    runtime.remove(row.name)
    left = runtime.client.containers.list(all=True, filters={"label": f"wharf.node={NODE}"})
    assert left == []


def test_a_sidecar_docker_cannot_start_leaves_nothing_of_the_instance(runtime):
    absent = {"image": "wharf-test/absent:1", "port": 8001}
    spec = parse_spec({**SPEC, "containers": [SPEC["containers"][0], absent]})
    plan = render(spec, Placement(limits=runtime.limits))
    request = InstanceRequest(spec.name, f"{spec.name}-9", "h", plan)
    with pytest.raises(InstanceError, match=r"containers\[1\]'s image wharf-test/absent:1"):
        runtime.create(request)
    assert runtime.list() == []
    left = runtime.client.containers.list(all=True, filters={"label": f"wharf.node={NODE}"})
    assert left == []
