"""Stage a model folder from OSS / OBS / S3 into the node-local cache.

Alibaba OSS and Huawei OBS speak the S3 API, so one boto3 client covers all three schemes;
only the defaults differ (addressing style, region, anonymous access). `stage()` copies every
object under a prefix into the node cache and returns that folder, ready to mount into an
engine container as its model directory.

Layout: one folder per *version* of a source, `cache_root/<cache_key>@<version>`. The key
names the source (endpoint, bucket, prefix); the version is a digest of what the listing
returned (every file's path, size and ETag). A folder's content never changes once it is in
place, so an instance that mounted it keeps its files however the bucket changes later:
re-staging a changed source makes a new folder next to the old one and never touches the
old one. Files that did not change are hard-linked from the previous copy instead of
downloaded again (no extra disk, no extra traffic).

Old versions go only through `prune(cache_root, in_use)`, which removes copies that no path in
`in_use` points into, and never the newest copy of a source (the one `stage()` returned last,
which an instance may be about to mount) nor one staged or reused within `min_age` seconds.
Its caller must know every live instance's mounts on this node. A `cache_root/<cache_key>`
folder from before versioning is tolerated, never renamed (a stopped container would
re-resolve its bind mount by path): its files are hard-linked into the first versioned copy,
and `prune` treats it as an older copy of the same source.

Guarantees:
- A version folder appears atomically (downloaded into a temp dir, verified, renamed), so an
  engine never sees a half-copied model, and a failed stage leaves nothing behind.
- A later stage of an unchanged source re-lists the bucket, downloads nothing and returns the
  same folder.
- Workers staging the same source at once serialise on `cache_root/<cache_key>.lock`; the
  second one finds the first one's result and returns it. `prune` takes the same lock without
  waiting, and skips a source that is being staged.
- Secrets never appear in reprs, logs or error messages.

Sources, clients and listings: contracts.object_store.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
)
from s3transfer.exceptions import RetriesExceededError

from contracts.object_store import (
    MANIFEST,
    ObjectSource,
    StagingError,
    StoredObject,
    Target,
    failure,
    list_objects,
    make_client,
    resolve,
)

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1
MIB = 1024 * 1024
# Objects above this size download as ranged GETs in parallel; 64 MiB keeps the number of
# requests for a multi-GB safetensors shard low while still using several connections.
DEFAULT_CHUNK_SIZE = 64 * MIB
DEFAULT_CONCURRENCY = 8
_PLAIN_MD5 = re.compile(r"^[0-9a-fA-F]{32}$")
# What cache_key() makes, and a version folder `<cache_key>@<version>` (cache keys never
# contain '@', so the split is unambiguous).
_KEY = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*-[0-9a-f]{16}$")
_VERSIONED = re.compile(r"^(?P<key>[A-Za-z0-9_-][A-Za-z0-9._-]*-[0-9a-f]{16})@[0-9a-f]{16}$")
# prune() keeps a copy this long after stage() last returned it: the instance it was staged
# for may not exist yet (an image pull can take a while), so no in-use list names it.
DEFAULT_PRUNE_MIN_AGE = 3600.0


def cached_sources(cache_root: Path) -> set[str]:
    """The cache keys of the sources staged under `cache_root` (any version)."""
    try:
        names = [path.name for path in cache_root.iterdir()]
    except OSError:  # no cache yet
        return set()
    return {match["key"] for name in names if (match := _VERSIONED.match(name))}


def cache_key(source: ObjectSource) -> str:
    """A stable, filesystem-safe folder name for the source: endpoint + bucket + prefix.

    Credentials are left out on purpose: two services reading the same model with different
    keys share one copy.
    """
    target = resolve(source)
    identity = f"{target.endpoint or 's3-default'}\n{target.bucket}\n{target.prefix}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    # A readable stem helps operators find a model in the cache; the digest makes it unique.
    leaf = target.prefix.rstrip("/").rsplit("/", 1)[-1]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{target.bucket}-{leaf}" if leaf else target.bucket)
    return f"{stem[:80].strip('.')}-{digest}"


def _manifest_matches(folder: Path, objects: dict[str, StoredObject]) -> bool:
    """The cached folder holds exactly the listed objects (by size and ETag) and is intact."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("version") != MANIFEST_VERSION:
        return False
    expected = {rel: {"size": o.size, "etag": o.etag} for rel, o in objects.items()}
    if manifest.get("objects") != expected:
        return False
    # Cheap check that nobody truncated or deleted a file since: a stat per file.
    for rel, obj in objects.items():
        try:
            if (folder / rel).stat().st_size != obj.size:
                return False
        except OSError:
            return False
    return True


def _version(objects: dict[str, StoredObject]) -> str:
    """A digest of the listing: an unchanged source always maps to the same folder."""
    listing = sorted((rel, o.size, o.etag) for rel, o in objects.items())
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:16]


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def _copies(cache_root: Path, key: str) -> list[Path]:
    """Every staged copy of a source, newest (most recently staged or reused) first: the
    version folders and a folder from before versioning (`cache_root/<key>` with a manifest).
    """
    found = [
        path
        for path in cache_root.glob(f"{key}@*")
        if _VERSIONED.match(path.name) and path.is_dir() and not path.is_symlink()
    ]
    legacy = cache_root / key
    if legacy.is_dir() and not legacy.is_symlink() and (legacy / MANIFEST).is_file():
        found.append(legacy)
    return sorted(found, key=lambda path: (_mtime(path), path.name), reverse=True)


def newest_copy(cache_root: Path, key: str) -> Path | None:
    """The source's most recently staged (or reused) copy on this node, if any."""
    copies = _copies(cache_root, key)
    return copies[0] if copies else None


def _reusable(copies: list[Path]) -> dict[tuple[str, int, str], Path]:
    """Files earlier copies hold, by (relative path, size, ETag): candidates for a hard link."""
    found: dict[tuple[str, int, str], Path] = {}
    for folder in copies:
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
        except (OSError, ValueError):
            continue
        objects = manifest.get("objects") if isinstance(manifest, dict) else None
        if not isinstance(objects, dict) or manifest.get("version") != MANIFEST_VERSION:
            continue
        for rel, meta in objects.items():
            try:
                ident = (str(rel), int(meta["size"]), str(meta["etag"]))
            except (KeyError, TypeError, ValueError):
                continue
            found.setdefault(ident, folder / ident[0])
    return found


def _link(source: Path | None, path: Path, obj: StoredObject) -> bool:
    """Hard-link an unchanged file from an earlier copy instead of downloading it. Removing
    that copy later leaves this link intact. False (download it) when in any doubt."""
    if source is None or not obj.etag:  # without an ETag "unchanged" means only "same size"
        return False
    try:
        info = os.lstat(source)
        if not stat.S_ISREG(info.st_mode) or info.st_size != obj.size:
            return False  # damaged since it was staged
        os.link(source, path)
    except OSError:  # gone, or a file system without hard links
        return False
    return True


def _touch(path: Path) -> None:
    """Mark a copy as the one stage() returned last: prune() orders copies by mtime."""
    with contextlib.suppress(OSError):
        os.utime(path)


def _clean_stale(cache_root: Path, key: str) -> None:
    """Temp dirs left by a stage or prune that crashed; only call with the key's lock held."""
    for stale in cache_root.glob(f".{key}.*"):
        shutil.rmtree(stale, ignore_errors=True)


class _Progress:
    """Thread-safe, throttled byte counter: s3transfer calls back from its worker threads, a
    few KiB at a time, so forwarding every call would flood the caller."""

    def __init__(self, total: int, report: Callable[[int, int], None] | None) -> None:
        self.total = total
        self.report = report
        self.done = 0
        self.reported = -1
        self.step = max(MIB, total // 100)
        self.lock = threading.Lock()

    def add(self, amount: int) -> None:
        # amount is negative when s3transfer retries a part and rewinds.
        with self.lock:
            self.done += amount
            due = self.done >= self.reported + self.step or self.done == self.total
            if self.report and due and self.done > self.reported:
                self.reported = self.done
                self.report(self.done, self.total)

    def finish(self) -> None:
        with self.lock:
            if self.report and self.reported != self.total:
                self.reported = self.total
                self.report(self.total, self.total)


def _verify(path: Path, obj: StoredObject) -> None:
    """Size always; MD5 where the ETag is a plain MD5 (multipart ETags are hashes of parts)."""
    size = path.stat().st_size
    if size != obj.size:
        raise StagingError(f"{obj.key}: downloaded {size} bytes, expected {obj.size}; stage again")
    with path.open("rb") as handle:
        if _PLAIN_MD5.match(obj.etag):
            digest = hashlib.md5(usedforsecurity=False)
            while chunk := handle.read(8 * MIB):
                digest.update(chunk)
            if digest.hexdigest() != obj.etag.lower():
                raise StagingError(
                    f"{obj.key}: MD5 {digest.hexdigest()} does not match ETag {obj.etag}; "
                    "the download was corrupted, stage again"
                )
        # The folder is renamed into place next: make the bytes durable first, so a crash
        # cannot leave a cache entry whose manifest vouches for unwritten data.
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(lock_path: Path, wait: bool = True) -> Iterator[bool]:
    """Hold the lock; yields False (not held) when `wait` is off and someone else holds it."""
    # The lock file stays: unlinking it would let a third worker lock a fresh inode while the
    # second still waits on the old one.
    with lock_path.open("a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            held = False
        else:
            held = True
        try:
            yield held
        finally:
            if held:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _download(
    client: Any,
    target: Target,
    objects: dict[str, StoredObject],
    folder: Path,
    config: TransferConfig,
    progress: _Progress,
    reuse: dict[tuple[str, int, str], Path],
) -> None:
    for rel, obj in sorted(objects.items()):
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if _link(reuse.get((rel, obj.size, obj.etag)), path, obj):
            progress.add(obj.size)
            continue
        try:
            # Managed transfer: above the chunk size the object arrives as parallel ranged
            # GETs, which s3transfer pins to one version of the object with If-Match; a version
            # other than the listed one is caught by _verify or by the next stage's re-list.
            client.download_file(
                target.bucket,
                obj.key,
                str(path),
                Callback=progress.add,
                Config=config,
            )
        except (ClientError, BotoCoreError, Boto3Error, RetriesExceededError, OSError) as exc:
            raise failure(target, exc, f"downloading {obj.key!r} from") from exc
        _verify(path, obj)


def stage(
    source: ObjectSource,
    cache_root: Path,
    progress: Callable[[int, int], None] | None = None,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> Path:
    """Copy the model folder at `source` into `cache_root/<cache_key>@<version>`; return it.

    Blocks while another worker stages the same source, then reuses its result. Re-lists the
    bucket every time: an unchanged source downloads nothing and returns the same folder, a
    changed one is staged into a new folder (unchanged files hard-linked, not downloaded)
    while earlier versions stay where they are for the instances using them (`prune` removes
    them). `progress(done_bytes, total_bytes)` is called from download threads, at most about
    a hundred times, and always ends at total (also on a cache hit, with no download).
    Raises StagingError; the cache is then left as it was.
    """
    target = resolve(source)
    key = cache_key(source)
    cache_root = Path(cache_root)
    try:
        cache_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise failure(target, exc, "preparing the cache for") from exc
    client = make_client(target, concurrency)
    with locked(cache_root / f"{key}.lock"):
        # Whoever held the lock before may have crashed mid-stage; its leftovers are ours now.
        _clean_stale(cache_root, key)
        objects = list_objects(client, target)
        total = sum(o.size for o in objects.values())
        final = cache_root / f"{key}@{_version(objects)}"
        if final.is_dir() and _manifest_matches(final, objects):
            log.info("staging %s: cache is current at %s", target.where, final)
            _touch(final)
            if progress:  # a caller showing a bar sees it complete either way
                progress(total, total)
            return final
        log.info("staging %s: %d files, %d bytes into %s", target.where, len(objects), total, final)
        counter = _Progress(total, progress)
        config = TransferConfig(
            multipart_threshold=chunk_size,
            multipart_chunksize=chunk_size,
            max_concurrency=concurrency,
            preferred_transfer_client="classic",
        )
        temp = Path(tempfile.mkdtemp(prefix=f".{key}.staging-", dir=cache_root))
        damaged: Path | None = None
        try:
            reuse = _reusable(_copies(cache_root, key))
            _download(client, target, objects, temp, config, counter, reuse)
            manifest = {
                "version": MANIFEST_VERSION,
                "source": {"uri": target.uri, "endpoint": target.endpoint},
                "objects": {rel: {"size": o.size, "etag": o.etag} for rel, o in objects.items()},
            }
            with (temp / MANIFEST).open("w") as handle:
                json.dump(manifest, handle, indent=1, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            _fsync_dir(temp)
            # mkdtemp makes 0700; engines in containers may run as another user.
            temp.chmod(0o755)
            if final.exists() or final.is_symlink():
                # Only this very version, damaged (a file truncated or deleted since): its
                # good files were linked above. rename() cannot replace a non-empty
                # directory, so move it aside first; under the lock the gap is ours.
                damaged = Path(tempfile.mkdtemp(prefix=f".{key}.old-", dir=cache_root))
                os.rename(final, damaged / "model")
            try:
                os.rename(temp, final)
            except OSError:
                if damaged is not None:  # put it back rather than lose it
                    os.rename(damaged / "model", final)
                raise
            _touch(final)
            _fsync_dir(cache_root)
        except StagingError:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        except OSError as exc:
            shutil.rmtree(temp, ignore_errors=True)
            raise failure(target, exc, "staging") from exc
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        finally:
            if damaged is not None:
                shutil.rmtree(damaged, ignore_errors=True)
        counter.finish()
        log.info("staged %s into %s", target.where, final)
        return final


def prune(
    cache_root: Path,
    in_use: Iterable[str | os.PathLike[str]],
    *,
    min_age: float = DEFAULT_PRUNE_MIN_AGE,
) -> list[Path]:
    """Remove staged copies that no instance uses; return the folders removed.

    `in_use` holds the host paths live instances on this node have mounted or read (running
    or not: a stopped container re-mounts its source when it starts again); a copy is kept
    when one of them is it or lies inside it. Also kept, whatever `in_use` says: the newest
    copy of each source, a copy `stage()` returned less than `min_age` seconds ago, and every
    copy of a source being staged right now (its lock is busy; the next prune gets it).
    A folder is renamed away before it is deleted, so nobody sees a half-deleted model.
    """
    cache_root = Path(cache_root)
    root = Path(os.path.realpath(cache_root))
    used: set[str] = set()
    for item in in_use:
        path = Path(os.path.realpath(item))
        if path != root and path.is_relative_to(root):
            used.add(path.relative_to(root).parts[0])
    try:
        names = [entry.name for entry in cache_root.iterdir()]
    except FileNotFoundError:
        return []
    keys: set[str] = set()
    for name in names:
        versioned = _VERSIONED.match(name)
        if versioned:
            keys.add(versioned["key"])
        elif _KEY.match(name) and (cache_root / name / MANIFEST).is_file():
            keys.add(name)  # a folder from before versioning
    removed: list[Path] = []
    for key in sorted(keys):
        with locked(cache_root / f"{key}.lock", wait=False) as held:
            if not held:
                log.info("prune: %s is being staged; left for the next prune", key)
                continue
            _clean_stale(cache_root, key)
            now = time.time_ns()
            for copy in _copies(cache_root, key)[1:]:
                if copy.name in used or now - _mtime(copy) < min_age * 1e9:
                    continue
                if discard(copy, f".{key}.old-"):
                    removed.append(copy)
    return removed


def discard(folder: Path, prefix: str) -> bool:
    """Remove a cached copy no instance uses: renamed away (beside it, `prefix`…) first, so
    nobody sees a half-deleted model; whether it went."""
    aside = Path(tempfile.mkdtemp(prefix=prefix, dir=folder.parent))
    try:
        os.rename(folder, aside / "model")
    except OSError as exc:
        log.warning("prune: cannot remove %s: %s", folder, exc)
        return False
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    log.info("prune: removed %s, which no instance uses", folder)
    return True
