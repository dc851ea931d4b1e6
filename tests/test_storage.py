"""workers/models/storage.py against a real S3 server: moto's, on loopback, in its own process.

Requests are counted on the server side with moto's request recorder, so "no download" is
proven by what reached the server, not by what the client says it did.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from boto3.s3.transfer import TransferConfig

from contracts.object_store import (
    MANIFEST,
    ObjectSource,
    StagingError,
    StoredObject,
    resolve,
    source_from_env,
)
from tests.moto_support import KEY_ID, SECRET, Moto, free_port
from workers.models.storage import MIB, _verify, cache_key, prune, stage

MODEL = {
    "config.json": b'{"model_type": "llama"}',
    "model.safetensors": os.urandom(300_000),
    "tokenizer.json": b'{"version": "1.0"}',
    "tokenizer_config.json": b"{}",
    "extra/nested/deep.txt": b"nested file",
}


@pytest.fixture(autouse=True)
def storage_env(moto: Moto, monkeypatch: pytest.MonkeyPatch) -> None:
    for scheme in ("OSS", "OBS", "S3"):
        monkeypatch.setenv(f"WHARF_{scheme}_ENDPOINT", moto.url)
        monkeypatch.setenv(f"WHARF_{scheme}_ACCESS_KEY_ID", KEY_ID)
        monkeypatch.setenv(f"WHARF_{scheme}_ACCESS_KEY_SECRET", SECRET)
        monkeypatch.delenv(f"WHARF_{scheme}_REGION", raising=False)
        monkeypatch.delenv(f"WHARF_{scheme}_ADDRESSING_STYLE", raising=False)
    # moto serves on 127.0.0.1, where bucket subdomains cannot resolve: OSS's default is
    # virtual-hosted style, so the OSS tests switch it the way an operator would.
    monkeypatch.setenv("WHARF_OSS_ADDRESSING_STYLE", "path")


def _bucket(s3: Any, files: dict[str, bytes] | None = None, prefix: str = "models/m/") -> str:
    name = f"wharf-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    for rel, body in (files or {}).items():
        s3.put_object(Bucket=name, Key=prefix + rel, Body=body)
    return name


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and p.name != MANIFEST
    }


def _leftovers(cache_root: Path) -> list[str]:
    return sorted(p.name for p in cache_root.iterdir() if not p.name.endswith(".lock"))


def test_stage_model_folder_preserves_layout(s3: Any, tmp_path: Path) -> None:
    bucket = _bucket(s3, MODEL)
    # Neither a console "folder" marker nor a sibling prefix sharing the name belongs in it.
    s3.put_object(Bucket=bucket, Key="models/m/empty-folder/", Body=b"")
    s3.put_object(Bucket=bucket, Key="models/m2/config.json", Body=b"another model")
    s3.put_object(Bucket=bucket, Key="other.txt", Body=b"outside the prefix")

    path = stage(source_from_env(f"s3://{bucket}/models/m"), tmp_path)

    assert path.parent == tmp_path
    assert path.name.startswith(cache_key(ObjectSource(f"s3://{bucket}/models/m/")) + "@")
    assert _tree(path) == MODEL
    manifest = json.loads((path / MANIFEST).read_text())
    assert set(manifest["objects"]) == set(MODEL)
    assert manifest["objects"]["config.json"]["size"] == len(MODEL["config.json"])
    assert SECRET not in (path / MANIFEST).read_text()
    assert _leftovers(tmp_path) == [path.name]  # the temp dir was renamed, not copied


def test_second_stage_downloads_nothing(moto: Moto, s3: Any, tmp_path: Path) -> None:
    bucket = _bucket(s3, MODEL)
    source = ObjectSource(f"s3://{bucket}/models/m/")
    first = stage(source, tmp_path)
    inode = (first / "model.safetensors").stat().st_ino

    calls: list[tuple[int, int]] = []
    with moto.record() as rec:
        second = stage(source, tmp_path, progress=lambda *done_total: calls.append(done_total))

    assert second == first
    assert rec.listings(bucket), "the recorder saw the re-list, so it was recording"
    assert rec.object_gets(bucket) == []
    assert (second / "model.safetensors").stat().st_ino == inode
    total = sum(len(body) for body in MODEL.values())
    assert calls == [(total, total)]


def _change(s3: Any, bucket: str) -> dict[str, bytes]:
    """Edit the model in the bucket as a user would; returns the new content."""
    s3.put_object(Bucket=bucket, Key="models/m/config.json", Body=b'{"model_type": "qwen2"}')
    s3.delete_object(Bucket=bucket, Key="models/m/tokenizer_config.json")
    s3.put_object(Bucket=bucket, Key="models/m/generation_config.json", Body=b"{}")
    expected = {k: v for k, v in MODEL.items() if k != "tokenizer_config.json"}
    expected["config.json"] = b'{"model_type": "qwen2"}'
    expected["generation_config.json"] = b"{}"
    return expected


def _fetched(rec: Any, bucket: str) -> list[str]:
    prefix = f"/{bucket}/models/m/"
    paths = [r["url"].split("?")[0].split(prefix, 1)[-1] for r in rec.object_gets(bucket)]
    return sorted(set(paths))


def test_changed_remote_is_staged_beside_the_version_in_use(
    moto: Moto, s3: Any, tmp_path: Path
) -> None:
    bucket = _bucket(s3, MODEL)
    source = ObjectSource(f"s3://{bucket}/models/m/")
    old = stage(source, tmp_path)
    # A running instance has the old folder mounted and a weights file open.
    inode = (old / "model.safetensors").stat().st_ino
    with (old / "model.safetensors").open("rb") as weights:
        expected = _change(s3, bucket)
        with moto.record() as rec:
            new = stage(source, tmp_path)
        assert weights.read() == MODEL["model.safetensors"]

    assert new != old and new.parent == tmp_path
    assert _tree(new) == expected
    # The old version is untouched: an engine that restarts or reads lazily finds its files.
    assert _tree(old) == MODEL
    assert (old / "model.safetensors").stat().st_ino == inode
    # Only the changed files were downloaded; the rest are hard links to the old copy.
    assert _fetched(rec, bucket) == ["config.json", "generation_config.json"]
    assert (new / "model.safetensors").stat().st_ino == inode
    assert sorted(_leftovers(tmp_path)) == sorted([old.name, new.name])


def test_reverted_remote_returns_its_earlier_version(moto: Moto, s3: Any, tmp_path: Path) -> None:
    bucket = _bucket(s3, MODEL)
    source = ObjectSource(f"s3://{bucket}/models/m/")
    first = stage(source, tmp_path)
    _change(s3, bucket)
    second = stage(source, tmp_path)
    for rel in ("config.json", "tokenizer_config.json"):
        s3.put_object(Bucket=bucket, Key=f"models/m/{rel}", Body=MODEL[rel])
    s3.delete_object(Bucket=bucket, Key="models/m/generation_config.json")

    with moto.record() as rec:
        again = stage(source, tmp_path)

    assert again == first != second
    assert rec.listings(bucket)
    assert rec.object_gets(bucket) == []
    assert _tree(again) == MODEL


def test_damaged_cache_is_restaged(moto: Moto, s3: Any, tmp_path: Path) -> None:
    bucket = _bucket(s3, MODEL)
    source = ObjectSource(f"s3://{bucket}/models/m/")
    path = stage(source, tmp_path)
    (path / "model.safetensors").write_bytes(b"truncated")
    (path / "extra/nested/deep.txt").unlink()

    with moto.record() as rec:
        again = stage(source, tmp_path)

    assert again == path  # the same version: the damaged copy is replaced, not kept
    assert _tree(again) == MODEL
    assert _fetched(rec, bucket) == ["extra/nested/deep.txt", "model.safetensors"]
    assert _leftovers(tmp_path) == [path.name]


def _versions(s3: Any, bucket: str, source: ObjectSource, root: Path, count: int) -> list[Path]:
    """Stage `count` versions of the source, changing config.json in between, oldest first."""
    paths = []
    for n in range(count):
        s3.put_object(Bucket=bucket, Key="models/m/config.json", Body=b'{"v": %d}' % n)
        paths.append(stage(source, root))
    assert len(set(paths)) == count
    return paths


def test_prune_keeps_versions_in_use_and_the_newest(s3: Any, tmp_path: Path) -> None:
    bucket = _bucket(s3, MODEL)
    source = ObjectSource(f"s3://{bucket}/models/m/")
    v0, v1, v2, v3 = _versions(s3, bucket, source, tmp_path, 4)
    # Instances mount the folder itself (docker) or read a path inside it (processes).
    in_use = {str(v0), str(v1 / "config.json"), str(tmp_path / "elsewhere")}

    assert prune(tmp_path, in_use, min_age=0) == [v2]

    assert sorted(_leftovers(tmp_path)) == sorted([v0.name, v1.name, v3.name])
    assert _tree(v0)["config.json"] == b'{"v": 0}'
    assert _tree(v1)["config.json"] == b'{"v": 1}'
    # Nothing in use: all but the newest go; its hard-linked files survive the others.
    assert sorted(prune(tmp_path, set(), min_age=0)) == sorted([v0, v1])
    assert _leftovers(tmp_path) == [v3.name]
    assert _tree(v3) == {**MODEL, "config.json": b'{"v": 3}'}
    assert prune(tmp_path, set(), min_age=0) == []
    assert stage(source, tmp_path) == v3


def test_prune_keeps_the_version_staged_last(s3: Any, tmp_path: Path) -> None:
    bucket = _bucket(s3, MODEL)
    source = ObjectSource(f"s3://{bucket}/models/m/")
    v0, v1 = _versions(s3, bucket, source, tmp_path, 2)
    s3.put_object(Bucket=bucket, Key="models/m/config.json", Body=b'{"v": 0}')
    assert stage(source, tmp_path) == v0  # the source went back: the older folder is current

    assert prune(tmp_path, set(), min_age=0) == [v1]
    assert _leftovers(tmp_path) == [v0.name]


def test_prune_spares_recent_versions(s3: Any, tmp_path: Path) -> None:
    bucket = _bucket(s3, MODEL)
    source = ObjectSource(f"s3://{bucket}/models/m/")
    v0, v1 = _versions(s3, bucket, source, tmp_path, 2)
    # v0 was returned moments ago: its instance may not be created yet.
    assert prune(tmp_path, set()) == []
    hour_ago = time.time() - 3601
    os.utime(v0, (hour_ago, hour_ago))
    assert prune(tmp_path, set()) == [v0]
    assert _leftovers(tmp_path) == [v1.name]


def test_prune_skips_a_source_being_staged(s3: Any, tmp_path: Path) -> None:
    bucket = _bucket(s3, MODEL)
    source = ObjectSource(f"s3://{bucket}/models/m/")
    v0, v1 = _versions(s3, bucket, source, tmp_path, 2)
    # A stage in progress (a crashed one's temp dir stands for its download) holds the lock.
    (tmp_path / f".{cache_key(source)}.staging-abc").mkdir()
    with (tmp_path / f"{cache_key(source)}.lock").open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        assert prune(tmp_path, set(), min_age=0) == []
        assert len(_leftovers(tmp_path)) == 3
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    assert prune(tmp_path, set(), min_age=0) == [v0]
    assert _leftovers(tmp_path) == [v1.name]


def test_folder_from_before_versioning_is_reused_then_pruned(
    moto: Moto, s3: Any, tmp_path: Path
) -> None:
    bucket = _bucket(s3, MODEL)
    source = ObjectSource(f"s3://{bucket}/models/m/")
    key = cache_key(source)
    # The old layout: the model straight in cache_root/<cache_key>, manifest included.
    legacy = tmp_path / key
    stage(source, tmp_path).rename(legacy)
    inode = (legacy / "model.safetensors").stat().st_ino
    # A folder that only looks like a cache entry (no manifest) is never touched.
    stranger = tmp_path / "operator-notes-0123456789abcdef"
    stranger.mkdir()

    with moto.record() as rec:
        path = stage(source, tmp_path)

    assert path != legacy and path.name.startswith(key + "@")
    assert rec.object_gets(bucket) == []  # every file linked from the old folder
    assert (path / "model.safetensors").stat().st_ino == inode
    assert _tree(legacy) == _tree(path) == MODEL
    assert prune(tmp_path, {str(legacy)}, min_age=0) == []
    assert prune(tmp_path, set(), min_age=0) == [legacy]
    assert sorted(_leftovers(tmp_path)) == sorted([path.name, stranger.name])
    assert _tree(path) == MODEL
    assert not (tmp_path / f"{stranger.name}.lock").exists()


def test_large_file_downloads_in_parts_and_is_verified(moto: Moto, s3: Any, tmp_path: Path) -> None:
    bucket = _bucket(s3, {"config.json": b"{}"})
    big = os.urandom(12 * MIB + 12345)
    key = "models/m/model-00001-of-00001.safetensors"
    # Upload as multipart, as any real tool does for big shards: its ETag is not an MD5.
    s3.upload_fileobj(
        io.BytesIO(big),
        bucket,
        key,
        Config=TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB),
    )
    assert "-" in s3.head_object(Bucket=bucket, Key=key)["ETag"]
    calls: list[tuple[int, int]] = []

    with moto.record() as rec:
        path = stage(
            ObjectSource(f"s3://{bucket}/models/m/"),
            tmp_path,
            progress=lambda done, total: calls.append((done, total)),
            chunk_size=5 * MIB,
        )

    data = (path / "model-00001-of-00001.safetensors").read_bytes()
    assert hashlib.sha256(data).digest() == hashlib.sha256(big).digest()
    ranged = [
        r
        for r in rec.object_gets(bucket)
        if r["method"] == "GET" and r["url"].split("?")[0].endswith(key) and "Range" in r["headers"]
    ]
    assert len(ranged) == 3  # 12 MiB in 5 MiB parts
    total = len(big) + 2
    assert calls[-1] == (total, total)
    assert all(t == total for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert len(calls) <= 20  # throttled: s3transfer reports every few KiB


def test_missing_bucket_names_it_and_leaves_nothing(moto: Moto, tmp_path: Path) -> None:
    source = ObjectSource(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/models/m/")
    with pytest.raises(StagingError) as caught:
        stage(source_from_env(source.uri), tmp_path)
    message = str(caught.value)
    assert "does not exist" in message
    assert source.uri.split("/")[2] in message
    assert moto.url in message
    assert SECRET not in message
    assert _leftovers(tmp_path) == []


def test_empty_prefix_is_an_error(s3: Any, tmp_path: Path) -> None:
    bucket = _bucket(s3, {"config.json": b"{}"}, prefix="models/real/")
    with pytest.raises(StagingError, match="no objects under") as caught:
        stage(ObjectSource(f"s3://{bucket}/models/typo/"), tmp_path)
    assert f"s3://{bucket}/models/typo/" in str(caught.value)
    assert _leftovers(tmp_path) == []


def test_bad_credentials_never_show_the_secret(moto: Moto, s3: Any, tmp_path: Path) -> None:
    bucket = _bucket(s3, MODEL)
    source = ObjectSource(
        f"s3://{bucket}/models/m/", access_key_id="AKIAUNKNOWN000000000", access_key_secret=SECRET
    )
    assert SECRET not in repr(source)
    assert SECRET not in str(source)
    assert SECRET not in repr(resolve(source))
    moto.require_auth(True)
    try:
        with pytest.raises(StagingError) as caught:
            stage(source, tmp_path)
    finally:
        moto.require_auth(False)
    message = str(caught.value)
    assert "rejected the credentials" in message
    assert "WHARF_S3_ACCESS_KEY_ID" in message
    assert source.uri in message
    assert SECRET not in message
    assert _leftovers(tmp_path) == []


def test_unreachable_endpoint(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    with pytest.raises(StagingError, match="cannot reach") as caught:
        stage(ObjectSource("oss://models/m/", endpoint=endpoint), tmp_path)
    assert endpoint in str(caught.value)
    assert "oss://models/m/" in str(caught.value)
    assert time.monotonic() - started < 15
    assert _leftovers(tmp_path) == []


def test_oss_and_obs_uris_use_the_s3_api(s3: Any, tmp_path: Path) -> None:
    bucket = _bucket(s3, MODEL)
    oss = stage(ObjectSource(f"oss://{bucket}/models/m/"), tmp_path)
    obs = stage(ObjectSource(f"obs://{bucket}/models/m/"), tmp_path)
    assert _tree(oss) == _tree(obs) == MODEL
    # Same endpoint, bucket and prefix: the same data, so one cache entry.
    assert oss == obs


def test_concurrent_stages_share_one_download(moto: Moto, s3: Any, tmp_path: Path) -> None:
    bucket = _bucket(s3, MODEL)
    source = ObjectSource(f"s3://{bucket}/models/m/")
    results: list[Path] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(stage(source, tmp_path))
        except BaseException as exc:  # surfaced by the assert below
            errors.append(exc)

    with moto.record() as rec:
        # flock() locks per open file, so two threads contend exactly like two processes.
        threads = [threading.Thread(target=worker) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert errors == []
    assert len(set(results)) == 1
    assert _tree(results[0]) == MODEL
    gets = [r for r in rec.object_gets(bucket) if r["method"] == "GET"]
    assert len(gets) == len(MODEL)  # each file fetched once, by whichever worker won the lock
    assert _leftovers(tmp_path) == [results[0].name]


def test_cache_key_is_stable_and_ignores_credentials(moto: Moto) -> None:
    base = ObjectSource("s3://bucket/models/qwen/", endpoint=moto.url)
    key = cache_key(base)
    assert key == cache_key(base)
    assert key == cache_key(ObjectSource("s3://bucket/models/qwen", endpoint=moto.url + "/"))
    assert key == cache_key(
        ObjectSource("s3://bucket/models/qwen/", moto.url, "other-id", "other-secret")
    )
    assert key != cache_key(ObjectSource("s3://bucket/models/qwen2/", endpoint=moto.url))
    assert key != cache_key(ObjectSource("s3://bucket2/models/qwen/", endpoint=moto.url))
    assert key != cache_key(ObjectSource("s3://bucket/models/qwen/", "http://elsewhere:9000"))
    assert key.startswith("bucket-qwen-")
    assert "/" not in key and not key.startswith(".")


def test_addressing_style_and_region_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WHARF_OSS_ADDRESSING_STYLE")
    monkeypatch.delenv("WHARF_S3_ENDPOINT")
    oss = resolve(ObjectSource("oss://b/p/", endpoint="oss-cn-hangzhou.aliyuncs.com"))
    assert (oss.addressing_style, oss.region) == ("virtual", "cn-hangzhou")
    assert oss.endpoint == "https://oss-cn-hangzhou.aliyuncs.com"
    internal = resolve(ObjectSource("oss://b/p/", "https://oss-cn-beijing-internal.aliyuncs.com"))
    assert internal.region == "cn-beijing"
    obs = resolve(ObjectSource("obs://b/p/", endpoint="obs.cn-north-4.myhuaweicloud.com"))
    assert (obs.addressing_style, obs.region) == ("path", "cn-north-4")
    assert resolve(ObjectSource("s3://b/p/", endpoint="http://minio:9000")).addressing_style == (
        "path"
    )
    aws = resolve(ObjectSource("s3://b/p/", access_key_id="a", access_key_secret="s"))
    assert (aws.endpoint, aws.addressing_style) == (None, "auto")
    monkeypatch.setenv("WHARF_OBS_ADDRESSING_STYLE", "virtual")
    monkeypatch.setenv("WHARF_OBS_REGION", "ap-southeast-1")
    obs = resolve(ObjectSource("obs://b/p/", endpoint="obs.cn-north-4.myhuaweicloud.com"))
    assert (obs.addressing_style, obs.region) == ("virtual", "ap-southeast-1")
    monkeypatch.setenv("WHARF_OBS_ADDRESSING_STYLE", "sideways")
    with pytest.raises(StagingError, match="virtual, path or auto"):
        resolve(ObjectSource("obs://b/p/"))


def test_bad_sources_are_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(StagingError, match="not an object-storage URI"):
        source_from_env("ftp://bucket/model/")
    with pytest.raises(StagingError, match=r"'\.\.'"):
        resolve(ObjectSource("s3://bucket/models/../etc/"))
    monkeypatch.delenv("WHARF_OSS_ENDPOINT")
    with pytest.raises(StagingError, match="WHARF_OSS_ENDPOINT"):
        resolve(ObjectSource("oss://bucket/model/"))
    monkeypatch.delenv("WHARF_S3_ACCESS_KEY_SECRET")
    with pytest.raises(StagingError, match="both access_key_id and access_key_secret"):
        resolve(ObjectSource("s3://bucket/model/"))


def test_source_from_env_fills_only_gaps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHARF_OBS_ENDPOINT", "https://obs.example")
    filled = source_from_env("obs://b/m/", access_key_id="mine")
    assert filled.endpoint == "https://obs.example"
    assert filled.access_key_id == "mine"
    assert filled.access_key_secret == SECRET
    assert source_from_env("obs://b/m/", endpoint="https://given").endpoint == "https://given"


def test_md5_mismatch_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"corrupted")
    good = hashlib.md5(b"original!").hexdigest()
    with pytest.raises(StagingError, match="MD5"):
        _verify(path, StoredObject(key="m/config.json", size=9, etag=good))
    _verify(path, StoredObject("m/config.json", 9, hashlib.md5(b"corrupted").hexdigest().upper()))
    with pytest.raises(StagingError, match="expected 10"):
        _verify(path, StoredObject(key="m/config.json", size=10, etag="abc-2"))
