"""`storage[].oss|obs|s3` with `readOnly: false`: a writable mount on a node without FUSE.

EAS mounts the bucket prefix itself (ossfs). Wharf's nodes need no FUSE: each instance gets
its own writable copy of the prefix, made from the node cache when it starts, and what it
adds or changes there is uploaded back to the prefix, every WHARF_STORAGE_SYNC_SECONDS while
it runs (workers.nodes.agent) and once more when it stops or restarts. So, honestly:
- a file appears in the bucket up to one period after it is written (or at the stop);
- instances do not see each other's writes until they restart (each starts from the bucket
  as it is then, which includes what earlier runs uploaded);
- deleting or renaming a file in the mount deletes nothing in the bucket (a rename uploads
  the new name);
- two instances writing the same file: the last upload wins;
- if an upload fails (credentials that may read but not write, the store down), the copy is
  kept on the node and tried again at the next sync; a restart first uploads what the last
  run left, and does not start until that has worked.

Layout (root: WHARF_WRITABLE_DIR): `root/<instance>/<index>/data` is mounted;
`root/<instance>/<index>/baseline.json` records each file's size and mtime as last uploaded
(or copied), so only new and changed files go up. No credentials are written on the node:
they come from the instance's spec.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

from boto3.exceptions import Boto3Error
from botocore.exceptions import BotoCoreError, ClientError

from contracts.object_store import (
    MANIFEST,
    ObjectSource,
    failure,
    make_client,
    resolve,
    source_from_env,
)
from contracts.spec import ObjectStorage, ServiceSpec

log = logging.getLogger(__name__)
DATA = "data"
BASELINE = "baseline.json"
_last_sync: dict[str, float] = {}  # instance -> monotonic time of its last periodic sync


class WritableStorageError(Exception):
    """An upload that failed; the copy stays on the node for the next try. Names the store
    and the file, never a secret."""


def writable_sources(spec: ServiceSpec) -> list[tuple[int, ObjectSource]]:
    """(index, source) of each storage entry the spec mounts writable, with its credentials."""
    found = []
    for i, entry in enumerate(spec.storage):
        store = entry.writable_store()
        if store is not None:
            found.append((i, _source(store)))
    return found


def _source(store: ObjectStorage) -> ObjectSource:
    return source_from_env(store.path, store.endpoint, store.access_key_id,
                           store.access_key_secret)  # fmt: skip


def prepare(root: Path, instance: str, index: int, staged: Path) -> Path:
    """A fresh writable copy of the staged folder for storage entry `index` of `instance`;
    the folder to mount. Call `release` first: an earlier run's copy is replaced."""
    home = root / instance / str(index)
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    data = home / DATA
    shutil.copytree(staged, data, symlinks=True, ignore=shutil.ignore_patterns(MANIFEST))
    _open_to_the_engine(data)
    _write_baseline(home, _files(data))
    return data


def _open_to_the_engine(data: Path) -> None:
    """The copy writable whatever user the engine runs as in its container (the worker's
    user owns it). Only this instance's container mounts it."""
    data.chmod(0o777)
    for top, folders, names in os.walk(data):
        for name in folders:
            os.chmod(os.path.join(top, name), 0o777)
        for name in names:
            path = os.path.join(top, name)
            if not os.path.islink(path):
                os.chmod(path, 0o666)


def sync(root: Path, instance: str, index: int, source: ObjectSource) -> list[str]:
    """Upload the files of the copy that are new or changed since the last upload; their
    paths relative to the mount. Raises WritableStorageError (what went up stays recorded)."""
    home = root / instance / str(index)
    data = home / DATA
    if not data.is_dir():
        return []
    baseline = _read_baseline(home)
    target = resolve(source)
    client = None
    uploaded: list[str] = []
    try:
        for rel, state in sorted(_files(data).items()):
            if baseline.get(rel) == state:
                continue
            client = client or make_client(target, 4)
            try:
                client.upload_file(str(data / rel), target.bucket, target.prefix + rel)
            except (ClientError, BotoCoreError, Boto3Error, OSError) as exc:
                # boto3 wraps the store's answer (S3UploadFailedError): say what it said
                cause = exc.__context__ if isinstance(exc, Boto3Error) else exc
                said = failure(target, cause or exc, f"uploading {rel!r} to")
                raise WritableStorageError(f"uploading {rel!r}: {said}") from None
            baseline[rel] = state
            uploaded.append(rel)
    finally:
        if uploaded:
            _write_baseline(home, baseline)
    if uploaded:
        log.info("%s: uploaded %d changed files to %s", instance, len(uploaded), target.where)
    return uploaded


def release(root: Path, instance: str, spec: ServiceSpec | None) -> None:
    """The last upload of each of the instance's copies, then the copies go. A copy whose
    upload fails stays (WritableStorageError), and so does one whose spec is gone."""
    folder = root / instance
    if not folder.is_dir():
        return
    if spec is None:
        log.warning("%s: writable copies kept in %s: its spec is gone", instance, folder)
        return
    for index, source in writable_sources(spec):
        sync(root, instance, index, source)
    shutil.rmtree(folder, ignore_errors=True)
    _last_sync.pop(instance, None)


def due(instance: str, interval: float, now: float | None = None) -> bool:
    """Whether a running instance's periodic sync is due (its first: one period after now)."""
    now = time.monotonic() if now is None else now
    last = _last_sync.setdefault(instance, now)
    return now - last >= interval


def sync_instance(root: Path, instance: str, spec: ServiceSpec) -> set[str]:
    """The periodic sync of a running instance's copies (workers.nodes.agent); changes no state."""
    _last_sync[instance] = time.monotonic()
    for index, source in writable_sources(spec):
        try:
            sync(root, instance, index, source)
        except WritableStorageError as exc:
            log.warning("%s: %s; tried again at the next sync", instance, exc)
    return set()


def _files(data: Path) -> dict[str, list[int]]:
    """Each regular file under `data` (symlinks are not followed): [size, mtime in ns]."""
    found = {}
    for top, _, names in os.walk(data):
        for name in names:
            path = Path(top) / name
            info = path.lstat()
            if path.is_file() and not path.is_symlink():
                found[path.relative_to(data).as_posix()] = [info.st_size, info.st_mtime_ns]
    return found


def _read_baseline(home: Path) -> dict[str, list[int]]:
    try:
        return dict(json.loads((home / BASELINE).read_text()))
    except (OSError, ValueError):
        return {}  # lost: everything counts as changed, and goes up again


def _write_baseline(home: Path, baseline: dict[str, list[int]]) -> None:
    temp = home / f".{BASELINE}.tmp"
    temp.write_text(json.dumps(baseline, sort_keys=True))
    os.replace(temp, home / BASELINE)
