"""workers.models.writable_storage against a real S3 server (moto's, on loopback): an instance's
writable copy of a bucket prefix, whose new and changed files go back to the prefix on a
sync and on release, only those, and which a failed upload never loses."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from contracts.object_store import MANIFEST, source_from_env
from contracts.spec import parse_spec
from tests.moto_support import KEY_ID, SECRET, Moto
from workers.models.storage import stage
from workers.models.writable_storage import (
    WritableStorageError,
    due,
    prepare,
    release,
    sync,
    writable_sources,
)

FILES = {"config.json": b'{"a": 1}', "data/rows.txt": b"one\n"}


@pytest.fixture(autouse=True)
def storage_env(moto: Moto, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHARF_S3_ENDPOINT", moto.url)
    monkeypatch.setenv("WHARF_S3_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("WHARF_S3_ACCESS_KEY_SECRET", SECRET)
    monkeypatch.delenv("WHARF_S3_REGION", raising=False)
    monkeypatch.setenv("WHARF_S3_ADDRESSING_STYLE", "path")


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"wharf-w-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    for rel, body in FILES.items():
        s3.put_object(Bucket=name, Key=f"work/{rel}", Body=body)
    return name


def spec_for(bucket: str, read_only: bool | None = False):
    store = {"path": f"s3://{bucket}/work/"}
    if read_only is not None:
        store["readOnly"] = read_only
    return parse_spec({
        "name": "svc", "containers": [{"image": "busybox", "command": "sleep 1d", "port": 8001}],
        "storage": [{"mount_path": "/in", "empty_dir": {}}, {"mount_path": "/work", "s3": store}],
    })  # fmt: skip


def _copy(bucket: str, tmp_path: Path) -> tuple[Path, Path]:
    source = source_from_env(f"s3://{bucket}/work/")
    staged = stage(source, tmp_path / "cache")
    return staged, prepare(tmp_path / "writable", "svc-1", 1, staged)


def _body(s3: Any, bucket: str, key: str) -> bytes:
    return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def test_only_entries_with_read_only_false_are_writable(bucket):
    assert [i for i, _ in writable_sources(spec_for(bucket, False))] == [1]
    assert writable_sources(spec_for(bucket, True)) == []
    assert writable_sources(spec_for(bucket, None)) == []


def test_the_copy_is_writable_and_apart_from_the_cache(bucket, tmp_path):
    staged, copy = _copy(bucket, tmp_path)
    assert (copy / "config.json").read_bytes() == FILES["config.json"]
    assert not (copy / MANIFEST).exists()
    (copy / "config.json").write_bytes(b"changed")
    assert (staged / "config.json").read_bytes() == FILES["config.json"]


def test_new_and_changed_files_are_uploaded_and_only_they(s3, moto, bucket, tmp_path):
    _, copy = _copy(bucket, tmp_path)
    (copy / "config.json").write_bytes(b'{"a": 2}')
    (copy / "out").mkdir()
    (copy / "out" / "result.txt").write_bytes(b"written by the engine")
    source = source_from_env(f"s3://{bucket}/work/")
    assert sync(tmp_path / "writable", "svc-1", 1, source) == ["config.json", "out/result.txt"]
    assert _body(s3, bucket, "work/config.json") == b'{"a": 2}'
    assert _body(s3, bucket, "work/out/result.txt") == b"written by the engine"
    with moto.record() as recording:
        assert sync(tmp_path / "writable", "svc-1", 1, source) == []
    assert [r for r in recording.requests if r["method"] in ("PUT", "POST")] == []


def test_release_uploads_the_last_writes_and_a_restart_sees_them(s3, bucket, tmp_path):
    _, copy = _copy(bucket, tmp_path)
    (copy / "late.txt").write_bytes(b"just before the stop")
    (copy / "data" / "rows.txt").unlink()  # deletions stay local
    release(tmp_path / "writable", "svc-1", spec_for(bucket))
    assert not (tmp_path / "writable" / "svc-1").exists()
    assert _body(s3, bucket, "work/late.txt") == b"just before the stop"
    assert _body(s3, bucket, "work/data/rows.txt") == FILES["data/rows.txt"]
    _, again = _copy(bucket, tmp_path)
    assert (again / "late.txt").read_bytes() == b"just before the stop"


def test_a_failed_upload_keeps_the_copy_and_names_no_secret(s3, bucket, tmp_path):
    _, copy = _copy(bucket, tmp_path)
    (copy / "precious.txt").write_bytes(b"must not be lost")
    for item in s3.list_objects_v2(Bucket=bucket)["Contents"]:
        s3.delete_object(Bucket=bucket, Key=item["Key"])
    s3.delete_bucket(Bucket=bucket)
    with pytest.raises(WritableStorageError, match="precious.txt") as caught:
        release(tmp_path / "writable", "svc-1", spec_for(bucket))
    assert SECRET not in str(caught.value)
    assert (copy / "precious.txt").read_bytes() == b"must not be lost"


def test_a_copy_whose_spec_is_gone_is_kept(bucket, tmp_path):
    _, copy = _copy(bucket, tmp_path)
    release(tmp_path / "writable", "svc-1", None)
    assert copy.is_dir()


@pytest.mark.parametrize(("elapsed", "expected"), [(0, False), (59.9, False), (60, True)])
def test_a_periodic_sync_is_due_once_a_period_has_passed(elapsed, expected):
    name = f"svc-{uuid.uuid4().hex[:6]}"
    assert due(name, 60, now=1000.0) is False  # the first look starts the period
    assert due(name, 60, now=1000.0 + elapsed) is expected
