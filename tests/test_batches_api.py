"""The workspace's batches in the REST API (controlplane.batches.api): newest first in pages,
filtered by status; progress while a batch runs; cancel for developers and up, a 409 once it
has ended; its error lines and files as downloads; another workspace's batch is a 404.
Batches are made with the store's own functions, as the gateway's calls make them."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from contracts import batch as contract
from controlplane.audit.models import AuditEntry
from controlplane.batches import store
from controlplane.batches.models import Batch
from controlplane.queues import store as queues
from controlplane.services.models import Service
from controlplane.tokens.models import ApiKey
from controlplane.workspaces.models import Workspace
from tests.api_support import client_for

pytestmark = pytest.mark.django_db
TEAM = "team"


@pytest.fixture(autouse=True)
def _files(settings, tmp_path):
    settings.WHARF_BATCH_DIR = tmp_path
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # publishing the snapshot is logged, not raised


@pytest.fixture
def dev() -> APIClient:
    return client_for("dev", role="developer", workspace=TEAM)


def _key(client: APIClient, workspace: str = TEAM) -> ApiKey:
    found = Workspace.objects.get(name=workspace)
    if not Service.objects.filter(workspace=found).exists():
        spec = {"name": f"chat-{workspace}", "metadata": {"instance": 1},
                "containers": [{"image": "i", "command": "c", "port": 8000}]}  # fmt: skip
        Service.objects.create(name=spec["name"], spec=spec, workspace=found)
    return ApiKey.issue(client.user, found, "k")[0]


def _batch(key: ApiKey, n: int, bad: int = 0) -> Batch:
    """A batch of `n` requests to the workspace's service and `bad` to no service."""
    model = Service.objects.get(workspace=key.workspace).name
    url = "/v1/chat/completions"
    models = [model] * n + ["nowhere"] * bad
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": url, "body": {"model": name}}
             for i, name in enumerate(models)]  # fmt: skip
    text = "\n".join(json.dumps(line) for line in lines).encode()
    file = store.save_file(key, "in.jsonl", "batch", SimpleUploadedFile("in.jsonl", text))
    return store.create_batch(key, file.id, "/v1/chat/completions", "24h", None)


def _answer_all(batch: Batch, code: int = 200) -> None:
    service = Service.objects.get(workspace=batch.workspace)
    for item in queues.lease(service, "g", ["i-0"], 30, room={"i-0": 100}):
        queues.finish(item.id, "g", code, b'{"ok": 1}', "application/json")
    store.settle(batch.id)  # on_commit does not run inside a test's transaction


def test_batches_come_newest_first_in_pages(dev):
    key = _key(dev)
    made = [_batch(key, 1).id for _ in range(3)]
    first = dev.get("/api/v1/batches?limit=2")
    assert first.status_code == 200 and first["X-Total-Count"] == "3"
    assert [b["id"] for b in first.json()] == made[::-1][:2]
    assert first.json()[0]["object"] == "batch"
    link = first["Link"]
    assert 'rel="next"' in link and f"after={made[1]}" in link
    rest = dev.get(f"/api/v1/batches?limit=2&after={made[1]}")
    assert [b["id"] for b in rest.json()] == [made[0]] and "Link" not in rest


def test_batches_filter_by_status_and_a_bad_one_is_named(dev):
    key = _key(dev)
    running, done = _batch(key, 1), _batch(key, 1)
    _answer_all(done)
    found = dev.get("/api/v1/batches?status=completed").json()
    assert [b["id"] for b in found] == [done.id]
    found = dev.get("/api/v1/batches?status=in_progress").json()
    assert [b["id"] for b in found] == [running.id]
    refused = dev.get("/api/v1/batches?status=done")
    assert refused.status_code == 400 and "status" in refused.json()["errors"]
    assert dev.get("/api/v1/batches?after=batch_nope").status_code == 400


def test_a_running_batch_shows_progress(dev):
    key = _key(dev)
    batch = _batch(key, 3, bad=1)
    service = Service.objects.get(workspace=batch.workspace)
    first, second, _ = queues.lease(service, "g", ["i-0"], 30, room={"i-0": 100})
    queues.finish(first.id, "g", 200, b"{}", "application/json")
    queues.finish(second.id, "g", 500, b"{}", "application/json")
    shown = dev.get(f"/api/v1/batches/{batch.id}").json()
    assert shown["status"] == contract.IN_PROGRESS
    assert shown["request_counts"] == {"total": 4, "completed": 1, "failed": 2}
    assert shown["services"] == [service.name]


def test_a_viewer_reads_but_may_not_cancel(dev):
    batch = _batch(_key(dev), 2)
    viewer = client_for("watcher", role="viewer", workspace=TEAM)
    assert viewer.get(f"/api/v1/batches/{batch.id}").status_code == 200
    refused = viewer.post(f"/api/v1/batches/{batch.id}/cancel")
    assert refused.status_code == 403 and "developer" in refused.json()["detail"]
    assert Batch.objects.get(pk=batch.pk).status == contract.IN_PROGRESS


def test_a_developer_cancels_and_an_ended_batch_is_a_conflict(dev):
    batch = _batch(_key(dev), 2)
    cancelled = dev.post(f"/api/v1/batches/{batch.id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == contract.CANCELLED
    assert not batch.items.exists()  # its waiting requests went
    assert cancelled.json()["services"] == []
    again = dev.post(f"/api/v1/batches/{batch.id}/cancel")
    assert again.status_code == 409 and "cancelled" in again.json()["detail"]
    audited = AuditEntry.objects.filter(action=f"POST /api/v1/batches/{batch.id}/cancel")
    assert list(audited.values_list("status", flat=True)) == [200]  # a refusal changes nothing


def test_another_workspaces_batch_and_files_are_not_found(dev):
    batch = _batch(_key(dev), 1)
    _answer_all(batch)
    batch.refresh_from_db()
    stranger = client_for("stranger", role="owner", workspace="elsewhere")
    files = (f"files/{batch.output_file_id}/content", f"files/{batch.input_file_id}/content")
    for path in (f"batches/{batch.id}", f"batches/{batch.id}/errors", *files):
        assert stranger.get(f"/api/v1/{path}").status_code == 404, path
    assert stranger.post(f"/api/v1/batches/{batch.id}/cancel").status_code == 404
    assert stranger.get("/api/v1/batches").json() == []


def test_files_download_and_error_lines_are_read(dev):
    batch = _batch(_key(dev), 2, bad=1)
    running = dev.get(f"/api/v1/batches/{batch.id}/errors").json()
    assert [line["error"]["code"] for line in running["data"]] == ["model_not_found"]
    _answer_all(batch)
    batch.refresh_from_db()
    output = dev.get(f"/api/v1/files/{batch.output_file_id}/content")
    assert output.status_code == 200 and "attachment" in output["Content-Disposition"]
    lines = [json.loads(text) for text in b"".join(output.streaming_content).splitlines()]
    assert sorted(line["custom_id"] for line in lines) == ["r0", "r1"]
    errors = dev.get(f"/api/v1/batches/{batch.id}/errors?limit=1").json()
    assert errors["data"][0]["custom_id"] == "r2" and errors["has_more"] is False
    assert dev.get(f"/api/v1/batches/{batch.id}/errors?limit=0").status_code == 400
    assert dev.get("/api/v1/files/file-nope/content").status_code == 404
