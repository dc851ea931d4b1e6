"""The batches' file store (controlplane.batches.files) with both stores: the folder
(WHARF_BATCH_DIR) and an S3-compatible bucket (WHARF_BATCH_STORE) on a real moto server. Upload,
content (streamed, through the gateways' internal route too), a batch's output file, delete,
per-workspace prefixes, a failed write that leaves nothing, and a store that cannot be reached
(a 503 naming it, never a secret)."""

from __future__ import annotations

import io
import json
import uuid
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import IntegrityError, transaction
from django.test import Client

from contracts import batch as contract
from contracts.plane_link import CALLER_KEY, HEADER, plane_key
from controlplane.batches import files, store
from controlplane.batches.models import Batch, File
from controlplane.queues import store as queues
from controlplane.queues.store import QueueRefusal
from controlplane.services.models import Service
from controlplane.tokens.models import ApiKey
from controlplane.workspaces.models import Workspace
from tests.api_support import default_workspace
from tests.moto_support import KEY_ID, SECRET, free_port

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _quiet(settings, tmp_path):
    settings.WHARF_BATCH_DIR = tmp_path / "files"
    settings.WHARF_BATCH_STORE = ""
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # publishing the snapshot is logged, not raised


def _use_bucket(settings, monkeypatch, endpoint: str, bucket: str) -> None:
    settings.WHARF_BATCH_STORE = f"s3://{bucket}/wharf/batches"
    monkeypatch.setenv("WHARF_S3_ENDPOINT", endpoint)
    monkeypatch.setenv("WHARF_S3_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("WHARF_S3_ACCESS_KEY_SECRET", SECRET)
    monkeypatch.setenv("WHARF_S3_REGION", "us-east-1")


@pytest.fixture
def bucket(settings, monkeypatch, moto, s3) -> str:
    name = f"batches-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    _use_bucket(settings, monkeypatch, moto.url, name)
    return name


@pytest.fixture(params=["folder", "bucket"])
def backend(request) -> str:
    """Each test of both stores runs once on the folder and once on moto's bucket."""
    if request.param == "bucket":
        request.getfixturevalue("bucket")
    return str(request.param)


def _keys(s3: Any, bucket: str) -> list[str]:
    return [item["Key"] for item in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def _key(workspace: Workspace | None = None, name: str = "owner") -> ApiKey:
    owner = get_user_model().objects.create(username=name)
    return ApiKey.issue(owner, workspace or default_workspace(), "k")[0]


def _chat() -> Service:
    spec = {"name": "chat", "metadata": {"instance": 1},
            "containers": [{"image": "i", "command": "c", "port": 8000}]}  # fmt: skip
    return Service.objects.create(name="chat", spec=spec, workspace=default_workspace())


def _lines(n: int) -> bytes:
    line = {"method": "POST", "url": "/v1/chat/completions", "body": {"model": "chat"}}
    return "\n".join(json.dumps({"custom_id": f"r{i}", **line}) for i in range(n)).encode()


def _upload(key: ApiKey, data: bytes) -> File:
    return store.save_file(key, "in.jsonl", "batch", SimpleUploadedFile("in.jsonl", data))


def _relayed(key: ApiKey) -> Client:
    """The internal routes as a gateway calls them (the plane key, the caller's key id)."""
    from django.conf import settings  # noqa: PLC0415

    return Client(
        headers={HEADER: plane_key(settings.WHARF_TOKEN_KEY.encode()), CALLER_KEY: key.public_id}
    )


def test_an_upload_streams_back_whole(backend):
    key = _key()
    data = _lines(3000)  # several chunks
    file = _upload(key, data)
    content = store.content_of(file)
    assert content.size == len(data) == file.bytes
    chunks = list(content.chunks)
    assert len(chunks) > 1 and b"".join(chunks) == data


def test_the_content_route_streams_the_stored_bytes(backend):
    key = _key()
    file = _upload(key, _lines(5))
    answer = _relayed(key).get(f"/internal/v1/files/{file.id}/content")
    assert answer.status_code == 200 and answer.streaming
    assert answer["Content-Length"] == str(file.bytes)
    assert b"".join(answer.streaming_content) == _lines(5)


def test_a_bucket_holds_each_workspace_under_its_own_prefix(bucket, s3):
    mine, theirs = _key(), _key(Workspace.objects.create(name="elsewhere"), "bob")
    a, b = _upload(mine, b"{}"), _upload(theirs, b"{}")
    assert sorted(_keys(s3, bucket)) == sorted([
        f"wharf/batches/{mine.workspace_id}/{a.id}",
        f"wharf/batches/{theirs.workspace_id}/{b.id}",
    ])  # fmt: skip
    assert mine.workspace_id != theirs.workspace_id


def test_a_bucket_store_writes_nothing_in_the_folder(bucket, settings):
    _upload(_key(), b"{}")
    assert not settings.WHARF_BATCH_DIR.exists()


def test_a_completed_batch_writes_its_output_file_to_the_store(bucket, s3):
    key, chat = _key(), _chat()
    batch = store.create_batch(key, _upload(key, _lines(2)).id, "/v1/chat/completions", "24h", None)
    for item in queues.lease(chat, "g", ["chat-0", "chat-1"], 30):
        queues.finish(item.id, "g", 200, b'{"ok": 1}', "application/json")
    store.settle(batch.id)  # on_commit does not run inside a test's transaction
    done = Batch.objects.get(pk=batch.pk)
    assert done.status == contract.COMPLETED and done.output_file_id
    output = File.objects.get(pk=done.output_file_id)
    assert f"wharf/batches/{key.workspace_id}/{output.id}" in _keys(s3, bucket)
    lines = [json.loads(line) for line in store.bytes_of(output).splitlines()]
    assert sorted(line["custom_id"] for line in lines) == ["r0", "r1"]
    assert all(line["response"]["body"] == {"ok": 1} for line in lines)


def test_delete_removes_the_row_and_the_bytes(backend):
    key = _key()
    file = _upload(key, b"{}")
    answer = _relayed(key).delete(f"/internal/v1/files/{file.id}")
    assert answer.status_code == 200 and answer.json()["deleted"] is True
    assert not File.objects.filter(pk=file.pk).exists()
    with pytest.raises(QueueRefusal) as raised:
        store.content_of(file)
    assert raised.value.status == 404


class _Breaks(io.BytesIO):
    """An upload whose stream fails once `after` bytes are read (a client gone mid-upload)."""

    def __init__(self, size: int, after: int) -> None:
        super().__init__(b"x" * size)
        self.after = after

    def read(self, size: int | None = -1, /) -> bytes:
        if self.tell() >= self.after:
            raise OSError("the client went away")
        return super().read(size)


def _broken(size: int, after: int) -> SimpleUploadedFile:
    upload = SimpleUploadedFile("in.jsonl", b"")
    upload.file, upload.size = _Breaks(size, after), size
    return upload


def test_a_failed_write_leaves_no_row_and_no_bytes(backend, settings, s3):
    with pytest.raises(OSError):
        store.save_file(_key(), "in.jsonl", "batch", _broken(files.CHUNK * 3, files.CHUNK))
    assert File.objects.count() == 0
    if backend == "bucket":
        name = settings.WHARF_BATCH_STORE.split("/")[2]
        assert _keys(s3, name) == []
        assert s3.list_multipart_uploads(Bucket=name).get("Uploads", []) == []
    else:
        assert [p for p in settings.WHARF_BATCH_DIR.rglob("*") if p.is_file()] == []


def test_a_multipart_upload_that_fails_is_aborted(bucket, s3, moto):
    """Past 8 MiB the bucket takes parts; one part landed, then the upload failed."""
    mib, key = 1024 * 1024, _key()
    with moto.record() as seen, pytest.raises(OSError):
        store.save_file(key, "in.jsonl", "batch", _broken(20 * mib, 9 * mib))
    started = [r for r in seen.requests if r["method"] == "POST" and "uploads" in r["url"]]
    parts = [r for r in seen.requests if r["method"] == "PUT" and "partNumber=" in r["url"]]
    assert started and parts  # it was a multipart upload, and a part was sent
    assert File.objects.count() == 0 and _keys(s3, bucket) == []
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_row_that_is_not_saved_takes_its_bytes_with_it(bucket, s3):
    key = _key()
    kept = _upload(key, b"{}")
    unsaved = File(id=contract.new_id("file-"), workspace=key.workspace, key_id="k",
                   filename=None, purpose="batch", bytes=2)  # fmt: skip
    with pytest.raises(IntegrityError), transaction.atomic():
        store._stored(unsaved, io.BytesIO(b"{}"))  # NOT NULL: filename
    assert _keys(s3, bucket) == [f"wharf/batches/{key.workspace_id}/{kept.id}"]


def test_an_unreachable_store_is_a_503_naming_it_without_the_secret(settings, monkeypatch):
    _use_bucket(settings, monkeypatch, f"http://127.0.0.1:{free_port()}", "batches")
    key = _key()
    answer = _relayed(key).post(
        "/internal/v1/files",
        {"purpose": "batch", "file": SimpleUploadedFile("in.jsonl", b"{}")},
    )
    assert answer.status_code == 503
    message = answer.json()["error"]["message"]
    assert "s3://batches/wharf/batches/" in message and "WHARF_BATCH_STORE" in message
    assert SECRET not in message and KEY_ID not in message
    assert File.objects.count() == 0


def test_an_unreachable_store_keeps_the_row_it_could_not_delete(bucket, settings, monkeypatch):
    key = _key()
    file = _upload(key, b"{}")
    monkeypatch.setenv("WHARF_S3_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    relayed = _relayed(key)
    for answer in (
        relayed.get(f"/internal/v1/files/{file.id}/content"),
        relayed.delete(f"/internal/v1/files/{file.id}"),
    ):
        assert answer.status_code == 503
        assert "cannot reach the batch file store" in answer.json()["error"]["message"]
    assert File.objects.filter(pk=file.pk).exists()


def test_a_missing_bucket_is_a_503_and_no_row(settings, monkeypatch, moto):
    _use_bucket(settings, monkeypatch, moto.url, f"absent-{uuid.uuid4().hex[:8]}")
    with pytest.raises(files.StoreUnavailable) as raised:
        _upload(_key(), b"{}")
    assert raised.value.status == 503 and "NoSuchBucket" in raised.value.message
    assert File.objects.count() == 0


def test_a_bad_store_setting_is_a_503_naming_the_setting(settings):
    settings.WHARF_BATCH_STORE = "ftp://batches"
    with pytest.raises(files.StoreUnavailable, match="WHARF_BATCH_STORE"):
        _upload(_key(), b"{}")


def test_a_batch_whose_store_is_away_is_settled_when_it_is_back(
    bucket, settings, monkeypatch, moto, s3
):
    key, chat = _key(), _chat()
    batch = store.create_batch(key, _upload(key, _lines(1)).id, "/v1/chat/completions", "24h", None)
    (item,) = queues.lease(chat, "g", ["chat-0"], 30)
    queues.finish(item.id, "g", 200, b'{"ok": 1}', "application/json")
    monkeypatch.setenv("WHARF_S3_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    store.settle(batch.id)  # logged, not raised: the beat tries again
    waiting = Batch.objects.get(pk=batch.pk)
    assert waiting.status == contract.IN_PROGRESS and not waiting.output_file_id
    assert File.objects.count() == 1  # the input only
    _use_bucket(settings, monkeypatch, moto.url, bucket)
    store.settle_orphans()
    done = Batch.objects.get(pk=batch.pk)
    assert done.status == contract.COMPLETED and done.completed == 1
    assert f"wharf/batches/{key.workspace_id}/{done.output_file_id}" in _keys(s3, bucket)
