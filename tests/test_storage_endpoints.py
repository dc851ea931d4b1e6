"""A tenant's storage endpoint is shared ground (issue 26): a developer cannot make Wharf
contact an address the operator has not granted their workspace, neither through the API nor
through a node, and what an endpoint answers never comes back in an event. A real listener on
127.0.0.1 counts what reaches it; the node is the real worker code on an in-memory runtime."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from contracts.object_store import StagingError, source_from_env
from tests.api_support import grant
from tests.fleet_support import Fleet
from tests.test_fleet import deploy
from workers.models.storage import stage

MARKER = "internal-secret-4b1d"  # what the listener's body holds
KEYS = {"access_key_id": "AK", "access_key_secret": "SK"}


class Listener(ThreadingHTTPServer):
    hits = 0


class Answer(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        self.server.hits += 1  # type: ignore[attr-defined]
        body = (f"<Error><Code>Internal Oops</Code><Message>{MARKER}</Message>"
                f"<Detail>{MARKER}</Detail></Error>").encode()  # fmt: skip
        self.send_response(500)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_HEAD = do_POST = do_PUT = _answer  # noqa: N815

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def listener():
    server = Listener(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def storage(endpoint: str) -> list[dict]:
    return [{"mount_path": "/data", "s3": {"path": "s3://internal/x/", "endpoint": endpoint,
                                           **KEYS}}]  # fmt: skip


@pytest.mark.django_db
def test_a_developers_endpoint_on_loopback_receives_nothing(api, store, settings, redis_url,
                                                             listener):  # fmt: skip
    server, url = listener
    spec = {"name": "probe", "llm": {"engine": "vllm-cpu", "model": "/data"},
            "storage": storage(url)}  # fmt: skip
    refused = api.post("/api/v1/services", spec, format="json")
    assert refused.status_code == 403
    assert "grants.storage_endpoints" in refused.json()["errors"]["storage[0].s3.endpoint"][0]
    # Saved past the API (before the grants existed): the node refuses it as well.
    settings.REDIS_URL = redis_url
    fleet = Fleet()
    fleet.node("a")
    deploy(spec)
    fleet.settle(3)
    assert fleet.states("probe") == [("a", "failed")]
    assert "storage[0].s3.endpoint" in fleet.rows("probe")[0].message
    assert server.hits == 0


@pytest.mark.django_db
def test_a_granted_endpoint_is_reached_but_its_answer_stays_out_of_the_event(
    api, store, settings, redis_url, listener
):
    server, url = listener
    grant(storage_endpoints=[url])
    spec = {"name": "probe", "llm": {"engine": "vllm-cpu", "model": "/data"},
            "storage": storage(url)}  # fmt: skip
    assert api.post("/api/v1/services", spec, format="json").status_code == 201
    settings.REDIS_URL = redis_url
    fleet = Fleet()
    fleet.node("a")
    fleet.settle(3)
    assert server.hits > 0  # granted: the operator listed it
    message = fleet.rows("probe")[0].message
    assert "failed" in message and MARKER not in message
    events = api.get("/api/v1/services/probe/events").json()
    assert events and all(MARKER not in e["message"] for e in events)


def test_staging_repeats_no_remote_text(listener, tmp_path: Path):
    _, url = listener
    with pytest.raises(StagingError) as caught:
        stage(source_from_env("s3://internal/x/", url, "AK", "SK"), tmp_path)
    assert MARKER not in str(caught.value) and "Oops" not in str(caught.value)
