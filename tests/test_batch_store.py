"""The batches' store (controlplane.batches.store) on the database: its bounds (file size,
lines, batches in flight), requests leased after an Async service's items and in batch order,
a request that no instance could finish in the error file, and expiry after 24 h."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from contracts import batch as contract
from controlplane.batches import store
from controlplane.batches.models import Batch, File
from controlplane.queues import store as queues
from controlplane.queues.models import QueueItem
from controlplane.queues.store import QueueRefusal
from controlplane.services.models import Service
from controlplane.tokens.models import ApiKey
from tests.api_support import default_workspace

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _files(settings, tmp_path):
    settings.WHARF_BATCH_DIR = tmp_path
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # publishing the snapshot is logged, not raised


def _key() -> ApiKey:
    owner = get_user_model().objects.create(username="owner")
    return ApiKey.issue(owner, default_workspace(), "k")[0]


def _chat() -> Service:
    spec = {"name": "chat", "metadata": {"instance": 1, "rpc": {"worker_threads": 2}},
            "containers": [{"image": "i", "command": "c", "port": 8000}]}  # fmt: skip
    return Service.objects.create(name="chat", spec=spec, workspace=default_workspace())


def _file(key: ApiKey, n: int) -> File:
    lines = "\n".join(
        json.dumps(
            {
                "custom_id": f"r{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "chat"},
            }
        )  # fmt: skip
        for i in range(n)
    )
    return store.save_file(key, "in.jsonl", "batch", SimpleUploadedFile("in.jsonl", lines.encode()))


def _batch(key: ApiKey, n: int) -> Batch:
    return store.create_batch(key, _file(key, n).id, "/v1/chat/completions", "24h", None)


def test_bounds(settings):
    key, _ = _key(), _chat()
    settings.WHARF_BATCH_FILE_MAX_BYTES = 10
    with pytest.raises(QueueRefusal) as raised:
        _file(key, 1)
    assert raised.value.status == 413 and "WHARF_BATCH_FILE_MAX_BYTES" in raised.value.message
    settings.WHARF_BATCH_FILE_MAX_BYTES = 10_000
    settings.WHARF_BATCH_MAX_LINES = 3
    with pytest.raises(QueueRefusal) as raised:
        _batch(key, 4)
    assert raised.value.status == 400 and "WHARF_BATCH_MAX_LINES" in raised.value.message
    settings.WHARF_BATCH_MAX_IN_FLIGHT = 1
    _batch(key, 2)
    with pytest.raises(QueueRefusal) as raised:
        _batch(key, 2)
    assert raised.value.status == 429 and "WHARF_BATCH_MAX_IN_FLIGHT" in raised.value.message
    for endpoint, window, field in (
        ("/v1/responses", "24h", "endpoint"),
        ("/v1/chat/completions", "1h", "completion_window"),
    ):
        with pytest.raises(QueueRefusal, match=field):
            store.create_batch(key, "file-x", endpoint, window, None)
    with pytest.raises(QueueRefusal) as raised:
        store.save_file(key, "x", "fine-tune", SimpleUploadedFile("x", b"{}"))
    assert raised.value.status == 400 and "purpose" in raised.value.message


def test_requests_go_after_async_items_the_oldest_batch_first():
    key, chat = _key(), _chat()
    first, second = _batch(key, 2), _batch(key, 2)
    plain = QueueItem.objects.create(service=chat, queue="input", request_id="x", data=b"{}")
    assert queues.lease(chat, "g1", ["chat-0"], 30, room={"chat-0": 0}) == []  # online first
    taken = queues.lease(chat, "g1", ["chat-0"], 30, room={"chat-0": 5})  # the window: 2
    assert [i.id for i in taken] == [plain.id, first.items.order_by("id")[0].id]
    taken = queues.lease(chat, "g2", ["chat-1", "chat-2"], 30)
    assert [i.batch_id for i in taken] == [first.id, second.id, second.id]


def test_a_request_no_instance_finishes_goes_to_the_error_file():
    key, chat = _key(), _chat()
    batch = _batch(key, 1)
    for attempt in range(queues.BATCH_MAX_DELIVERY):
        (item,) = queues.lease(chat, "g", ["chat-0"], 30)
        assert queues.give_back(item.id, "g", f"instance failed ({attempt})")
    store.settle(batch.id)  # on_commit does not run inside a test's transaction
    done = Batch.objects.get(pk=batch.pk)
    assert done.status == contract.COMPLETED and (done.completed, done.failed) == (0, 1)
    error = json.loads(store.bytes_of(File.objects.get(pk=done.error_file_id)))
    assert error["error"]["code"] == "delivery_failed" and error["custom_id"] == "r0"
    assert not done.output_file_id and QueueItem.objects.count() == 0


def test_a_batch_past_its_window_expires():
    key, chat = _key(), _chat()
    batch = _batch(key, 3)
    (item, _) = queues.lease(chat, "g", ["chat-0"], 30)
    Batch.objects.filter(pk=batch.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    store.expire_due()
    assert Batch.objects.get(pk=batch.pk).status == contract.EXPIRED
    assert QueueItem.objects.filter(batch=batch).count() == 2  # the leased ones still finish
    queues.finish(item.id, "g", 200, b'{"ok": 1}', "application/json")
    store.settle(batch.id)
    assert not Batch.objects.get(pk=batch.pk).output_file_id  # one still works
    (other,) = QueueItem.objects.filter(batch=batch, queue="input")
    queues.finish(other.id, "g", 200, b'{"ok": 2}', "application/json")
    store.settle(batch.id)
    done = Batch.objects.get(pk=batch.pk)
    assert done.status == contract.EXPIRED and (done.completed, done.failed) == (2, 1)
    error = json.loads(store.bytes_of(File.objects.get(pk=done.error_file_id)))
    assert error["error"]["code"] == "batch_expired"


def test_a_batch_whose_service_went_is_settled_with_what_it_has():
    key, chat = _key(), _chat()
    batch = _batch(key, 2)
    (item, _) = queues.lease(chat, "g", ["chat-0"], 30)
    queues.finish(item.id, "g", 200, b'{"ok": 1}', "application/json")
    QueueItem.objects.filter(batch=batch, queue="input").delete()  # as deleting chat does
    store.settle_orphans()
    done = Batch.objects.get(pk=batch.pk)
    assert done.status == contract.COMPLETED and (done.total, done.completed) == (2, 1)
    assert done.output_file_id
