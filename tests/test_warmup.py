"""EAS's warm_up_data_path: the file's format as a table; a real engine process behind its
real front, with the real starter and node agent, gets the file's requests after its
readiness passes and before it is routed; an unreadable file routes it anyway, saying so;
dockerd reads a file as a container sees it."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from collections.abc import Iterator

import docker
import pytest

from contracts.eas import normalise
from contracts.spec import SpecError, parse_spec
from contracts.warmup import MAX_REQUESTS, Replay, read_warm_up
from controlplane.services.choices import InstanceState
from controlplane.services.models import Event
from tests.api_support import grant
from tests.probes_support import placed, state, until
from workers.runtimes.docker import DockerRuntime
from workers.runtimes.process import ProcessRuntime

BASE = {"name": "web", "containers": [{"image": "img", "command": "serve", "port": 8000}]}

# An engine that writes each request it gets (method, path, body) as a line of FLAGS/seen.
RECORDER = r"""
import json, os, pathlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
seen = pathlib.Path(os.environ["FLAGS"]) / "seen"
class Handler(BaseHTTPRequestHandler):
    def answer(self):
        size = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(size).decode() if size else ""
        if self.path != "/health":
            with seen.open("a") as out:
                out.write(json.dumps([self.command, self.path, body]) + "\n")
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()
    do_GET = do_POST = answer
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
"""


@pytest.mark.parametrize(
    ("text", "requests", "unreadable"),
    [
        ('{"path": "/v1/completions", "body": {"prompt": "hi"}}\n'
         '{"method": "get", "path": "/v1/models"}',
         [Replay("POST", "/v1/completions", {"prompt": "hi"}), Replay("GET", "/v1/models")], 0),
        ('# a comment\n\n{"prompt": "bare"}', [Replay("POST", "/d", {"prompt": "bare"})], 0),
        ('not json\n[1, 2]\n{"path": "relative"}\n{"path": "/x", "method": "BREW"}\n'
         '{"path": "/x", "headers": {}}', [], 5),
    ],
)  # fmt: skip
def test_a_warm_up_file_is_json_lines_of_requests(text, requests, unreadable):
    found = read_warm_up(text, "/d")
    assert (found.requests, found.unreadable, found.cut) == (requests, unreadable, False)


def test_a_long_file_is_cut_and_the_path_is_checked():
    found = read_warm_up("{}\n" * (MAX_REQUESTS + 5), "/d")
    assert len(found.requests) == MAX_REQUESTS and found.cut
    for bad in ("warmup.jsonl", "/data/../etc/passwd"):
        with pytest.raises(SpecError) as caught:
            parse_spec(normalise({**BASE, "warm_up_data_path": bad}))
        assert "warm_up_data_path" in caught.value.errors
    warmed = parse_spec(normalise({**BASE, "warm_up_data_path": "/data/w.jsonl"}))
    assert warmed.spec_hash() == parse_spec(normalise(BASE)).spec_hash()  # shapes no instance


@pytest.fixture
def runtime(tmp_path, settings) -> Iterator[ProcessRuntime]:
    grant(process_code=True)
    (tmp_path / "server.py").write_text(RECORDER)
    found = ProcessRuntime(str(tmp_path / "models"), tmp_path / "instances")
    yield found
    for instance in found.list():
        found.remove(instance.name)


def engine(tmp_path, name: str, warm_up: str) -> dict:
    return {"name": name, "warm_up_data_path": warm_up, "containers": [{
        "image": "none", "port": 8000, "command": f"exec {sys.executable} {tmp_path}/server.py",
        "env": [{"name": "FLAGS", "value": str(tmp_path)}]}]}  # fmt: skip


@pytest.mark.django_db
@pytest.mark.timeout(120)
def test_an_instance_is_warmed_up_before_it_is_routed(tmp_path, runtime):
    lines = [
        {"path": "/v1/completions", "body": {"prompt": "warm", "max_tokens": 1}},
        {"method": "GET", "path": "/v1/models"},
        {"prompt": "bare"},
        "no request",
    ]
    (tmp_path / "warmup.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    row = placed(engine(tmp_path, "warm", str(tmp_path / "warmup.jsonl")))
    row = until(runtime, row, state(InstanceState.READY))
    seen = [json.loads(x) for x in (tmp_path / "seen").read_text().splitlines()]
    assert seen == [["POST", "/v1/completions", '{"prompt":"warm","max_tokens":1}'],
                    ["GET", "/v1/models", ""], ["POST", "/", '{"prompt":"bare"}']]  # fmt: skip
    reasons = list(Event.objects.filter(service=row.service_id).order_by("id")
                   .values_list("reason", "message"))  # fmt: skip
    warmed = [m for r, m in reasons if r == "InstanceWarmedUp"]
    assert len(warmed) == 1 and "replayed 3 requests" in warmed[0] and ": 3 2xx" in warmed[0]
    assert "1 lines were no request" in warmed[0]
    order = [r for r, _ in reasons]
    assert order.index("InstanceWarmedUp") < order.index("InstanceReady")  # routed after


@pytest.mark.django_db
@pytest.mark.timeout(120)
def test_an_unreadable_warm_up_file_routes_the_instance_anyway(tmp_path, runtime):
    row = placed(engine(tmp_path, "cold", str(tmp_path / "missing.jsonl")))
    row = until(runtime, row, state(InstanceState.READY))
    skipped = Event.objects.get(service=row.service_id, reason="WarmUpSkipped")
    assert "cannot read" in skipped.message and "missing.jsonl" in skipped.message
    assert not (tmp_path / "seen").exists()


def test_dockerd_reads_a_file_as_the_container_sees_it():
    client = docker.from_env()
    image = next(tag for i in client.images.list("wharf/wharf") for tag in i.tags)
    container = client.containers.run(image, ["sleep", "60"], name="wharf-test-warmup-read",
                                      entrypoint=[], network_mode="none", detach=True)  # fmt: skip
    try:
        data = tarfile.TarInfo("w.jsonl")
        data.size = 12
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            tar.addfile(data, io.BytesIO(b'{"a": 1}\n{}\n'))
        container.put_archive("/tmp", archive.getvalue())
        runtime = DockerRuntime("/nonexistent")
        assert runtime.read_file(container.name, "/tmp/w.jsonl", 1000) == b'{"a": 1}\n{}\n'
        assert runtime.read_file(container.name, "/tmp/w.jsonl", 4) == b'{"a"'
        for missing in ("/tmp/none.jsonl", "/tmp"):
            with pytest.raises(OSError):
                runtime.read_file(container.name, missing, 1000)
    finally:
        container.remove(force=True)
