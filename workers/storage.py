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

Environment (per scheme, `<SCHEME>` is OSS, OBS or S3; entries in the spec win):
    WHARF_<SCHEME>_ENDPOINT, WHARF_<SCHEME>_ACCESS_KEY_ID, WHARF_<SCHEME>_ACCESS_KEY_SECRET,
    WHARF_<SCHEME>_ADDRESSING_STYLE (virtual|path|auto), WHARF_<SCHEME>_REGION
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)
from s3transfer.exceptions import RetriesExceededError

log = logging.getLogger(__name__)

SCHEMES = ("oss", "obs", "s3")
MANIFEST = ".wharf-manifest.json"
MANIFEST_VERSION = 1
MIB = 1024 * 1024
# Objects above this size download as ranged GETs in parallel; 64 MiB keeps the number of
# requests for a multi-GB safetensors shard low while still using several connections.
DEFAULT_CHUNK_SIZE = 64 * MIB
DEFAULT_CONCURRENCY = 8
_URI = re.compile(
    r"^(?P<scheme>oss|obs|s3)://(?P<bucket>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<rest>/.*)?$"
)
_PLAIN_MD5 = re.compile(r"^[0-9a-fA-F]{32}$")
# Real OSS / OBS endpoints carry the region the V4 signature needs; a wrong one is rejected.
_OSS_REGION = re.compile(r"(?:^|\.)oss-([a-z0-9-]+?)(?:-internal)?\.aliyuncs\.com$")
_OBS_REGION = re.compile(r"(?:^|\.)obs\.([a-z0-9-]+)\.myhuaweicloud\.com$")
_ADDRESSING_STYLES = ("virtual", "path", "auto")
# What cache_key() makes, and a version folder `<cache_key>@<version>` (cache keys never
# contain '@', so the split is unambiguous).
_KEY = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*-[0-9a-f]{16}$")
_VERSIONED = re.compile(r"^(?P<key>[A-Za-z0-9_-][A-Za-z0-9._-]*-[0-9a-f]{16})@[0-9a-f]{16}$")
# prune() keeps a copy this long after stage() last returned it: the instance it was staged
# for may not exist yet (an image pull can take a while), so no in-use list names it.
DEFAULT_PRUNE_MIN_AGE = 3600.0


class StagingError(Exception):
    """Staging failed; the message says what to fix and never contains a secret."""


@dataclass(frozen=True)
class ObjectSource:
    uri: str  # oss://bucket/prefix/ | obs://bucket/prefix/ | s3://bucket/prefix/
    endpoint: str | None = None  # else WHARF_<SCHEME>_ENDPOINT; s3 may use boto3's default
    access_key_id: str | None = None
    access_key_secret: str | None = field(default=None, repr=False)  # never printed or logged


@dataclass(frozen=True)
class _Target:
    """A source with every default applied: what the client and the cache key are built from."""

    scheme: str
    bucket: str
    prefix: str  # '' (whole bucket) or ends with '/'
    endpoint: str | None  # normalised URL, or None for boto3's default (AWS S3 only)
    region: str | None
    addressing_style: str
    access_key_id: str | None
    access_key_secret: str | None = field(repr=False)

    @property
    def uri(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}"

    @property
    def where(self) -> str:
        """The source as named in error messages: URI and endpoint, never credentials."""
        return f"{self.uri} (endpoint {self.endpoint or 'AWS S3 default'})"


def _env(scheme: str, name: str) -> str | None:
    return os.environ.get(f"WHARF_{scheme.upper()}_{name}") or None


def _split_uri(uri: str) -> tuple[str, str, str]:
    match = _URI.match(uri.strip())
    if not match:
        raise StagingError(
            f"{uri!r} is not an object-storage URI; use oss://bucket/prefix/, "
            "obs://bucket/prefix/ or s3://bucket/prefix/"
        )
    prefix = (match["rest"] or "/").lstrip("/")
    # The URI names a model folder: without the trailing slash `models/qwen` would also pick
    # up `models/qwen2/...`.
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    if any(part in (".", "..") for part in prefix.split("/")):
        raise StagingError(f"{uri!r}: a storage prefix must not contain '.' or '..' segments")
    return match["scheme"], match["bucket"], prefix


def _normalise_endpoint(endpoint: str) -> str:
    endpoint = endpoint.strip().rstrip("/")
    # EAS users write bare hosts (oss-cn-hangzhou.aliyuncs.com); boto3 needs a URL.
    if "://" not in endpoint:
        endpoint = f"https://{endpoint}"
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise StagingError(f"endpoint {endpoint!r} is not a valid http(s) URL or host name")
    return f"{parts.scheme}://{parts.netloc.lower()}{parts.path}"


def source_from_env(
    uri: str,
    endpoint: str | None = None,
    access_key_id: str | None = None,
    access_key_secret: str | None = None,
) -> ObjectSource:
    """The source with gaps filled from WHARF_<SCHEME>_ENDPOINT / _ACCESS_KEY_ID / _SECRET."""
    scheme, _, _ = _split_uri(uri)
    return ObjectSource(
        uri=uri.strip(),
        endpoint=endpoint or _env(scheme, "ENDPOINT"),
        access_key_id=access_key_id or _env(scheme, "ACCESS_KEY_ID"),
        access_key_secret=access_key_secret or _env(scheme, "ACCESS_KEY_SECRET"),
    )


def _resolve(source: ObjectSource) -> _Target:
    filled = source_from_env(
        source.uri, source.endpoint, source.access_key_id, source.access_key_secret
    )
    scheme, bucket, prefix = _split_uri(filled.uri)
    if filled.endpoint is None and scheme != "s3":
        raise StagingError(
            f"{filled.uri}: no endpoint; give the endpoint in the spec (storage entry) or set "
            f"WHARF_{scheme.upper()}_ENDPOINT on the worker (e.g. "
            + (
                "https://oss-cn-hangzhou.aliyuncs.com)"
                if scheme == "oss"
                else "https://obs.cn-north-4.myhuaweicloud.com)"
            )
        )
    endpoint = _normalise_endpoint(filled.endpoint) if filled.endpoint else None
    if bool(filled.access_key_id) != bool(filled.access_key_secret):
        raise StagingError(
            f"{filled.uri}: give both access_key_id and access_key_secret, or neither "
            f"(WHARF_{scheme.upper()}_ACCESS_KEY_ID / _ACCESS_KEY_SECRET)"
        )
    style = (_env(scheme, "ADDRESSING_STYLE") or "").lower()
    if style and style not in _ADDRESSING_STYLES:
        raise StagingError(
            f"WHARF_{scheme.upper()}_ADDRESSING_STYLE={style!r}: use virtual, path or auto"
        )
    if not style:
        # OSS rejects path-style requests on its real endpoints; OBS and S3-compatible
        # servers behind a custom endpoint (MinIO, moto, on-prem gateways) usually want path
        # style because bucket subdomains do not resolve; AWS itself is best left to boto3.
        if scheme == "oss":
            style = "virtual"
        elif endpoint is not None:
            style = "path"
        else:
            style = "auto"
    region = _env(scheme, "REGION")
    if region is None and endpoint is not None:
        host = urlsplit(endpoint).hostname or ""
        pattern = {"oss": _OSS_REGION, "obs": _OBS_REGION}.get(scheme)
        found = pattern.search(host) if pattern else None
        region = found.group(1) if found else None
    return _Target(
        scheme=scheme,
        bucket=bucket,
        prefix=prefix,
        endpoint=endpoint,
        region=region,
        addressing_style=style,
        access_key_id=filled.access_key_id,
        access_key_secret=filled.access_key_secret,
    )


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
    target = _resolve(source)
    identity = f"{target.endpoint or 's3-default'}\n{target.bucket}\n{target.prefix}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    # A readable stem helps operators find a model in the cache; the digest makes it unique.
    leaf = target.prefix.rstrip("/").rsplit("/", 1)[-1]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{target.bucket}-{leaf}" if leaf else target.bucket)
    return f"{stem[:80].strip('.')}-{digest}"


def _client(target: _Target, concurrency: int) -> Any:
    options: dict[str, Any] = {
        "s3": {"addressing_style": target.addressing_style},
        "retries": {"max_attempts": 3, "mode": "standard"},
        "connect_timeout": 10,
        "read_timeout": 120,
        "max_pool_connections": max(10, concurrency),
        # botocore >= 1.36 adds CRC checksums by default; several S3-compatible stores
        # (OSS, OBS, older MinIO) reject or mishandle them, and we verify MD5 ourselves.
        "request_checksum_calculation": "when_required",
        "response_checksum_validation": "when_required",
    }
    anonymous = target.access_key_id is None and target.scheme != "s3"
    if anonymous:
        # No keys for OSS / OBS: a public-read bucket. AWS's credential chain (instance
        # roles, ~/.aws) would only ever hold keys for AWS, never for these clouds.
        options["signature_version"] = botocore.UNSIGNED
    session = boto3.session.Session()
    return session.client(
        "s3",
        endpoint_url=target.endpoint,
        region_name=target.region,
        aws_access_key_id=target.access_key_id,
        aws_secret_access_key=target.access_key_secret,
        config=Config(**options),
    )


def _failure(target: _Target, exc: BaseException, doing: str) -> StagingError:
    """Turn a boto / OS error into a message that tells the user what to fix."""
    scheme = target.scheme.upper()
    where = target.where
    code = ""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code == "NoSuchBucket":
            message = (
                f"bucket {target.bucket!r} does not exist at {where}; "
                "check the bucket name and that the endpoint is the bucket's region"
            )
        elif code in (
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "AuthorizationHeaderMalformed",
        ):
            message = (
                f"{where} rejected the credentials ({code}); check access_key_id and "
                f"access_key_secret in the spec or WHARF_{scheme}_ACCESS_KEY_ID / "
                f"WHARF_{scheme}_ACCESS_KEY_SECRET on the worker"
            )
        elif code in ("AccessDenied", "403", "AllAccessDisabled") or status == 403:
            message = (
                f"access denied while {doing} {where}; grant the key read and list "
                f"permission on the bucket, or set credentials (WHARF_{scheme}_ACCESS_KEY_ID "
                f"/ WHARF_{scheme}_ACCESS_KEY_SECRET)"
            )
        elif code in ("PreconditionFailed", "412", "NoSuchKey", "404"):
            message = f"{where} changed while {doing} it; stage again"
        elif code in ("PermanentRedirect", "301", "IllegalLocationConstraintException"):
            message = f"bucket {target.bucket!r} is in another region than {where}; fix endpoint"
        else:
            message = f"{doing} {where} failed: {code or status} {error.get('Message', '')}"
    elif isinstance(exc, NoCredentialsError):
        message = (
            f"no credentials for {where}; set access_key_id / access_key_secret in the spec "
            f"or WHARF_{scheme}_ACCESS_KEY_ID / WHARF_{scheme}_ACCESS_KEY_SECRET on the worker"
        )
    elif isinstance(exc, EndpointConnectionError | ConnectTimeoutError):
        message = (
            f"cannot reach {where}; check the endpoint URL and that this node can reach it "
            "(OSS internal endpoints work only from inside the same region's VPC)"
        )
    elif isinstance(exc, ReadTimeoutError):
        message = f"{where} stopped answering while {doing} it; stage again"
    elif isinstance(exc, OSError):
        message = f"cannot write the model cache while {doing} {where}: {exc}"
    else:
        message = f"{doing} {where} failed: {exc}"
    if target.access_key_secret:  # belt and braces: a server could echo anything back
        message = message.replace(target.access_key_secret, "******")
    return StagingError(message)


@dataclass(frozen=True)
class _Object:
    key: str  # full object key
    size: int
    etag: str  # without quotes


def _list(client: Any, target: _Target) -> dict[str, _Object]:
    """Every object under the prefix, by path relative to it (a POSIX relative path)."""
    objects: dict[str, _Object] = {}
    paginator = client.get_paginator("list_objects_v2")
    try:
        for page in paginator.paginate(Bucket=target.bucket, Prefix=target.prefix):
            for item in page.get("Contents", []):
                key: str = item["Key"]
                relative = key[len(target.prefix) :]
                # Console "folders" are zero-byte objects ending in '/'; the layout is implied
                # by the files themselves.
                if not relative or relative.endswith("/"):
                    continue
                parts = relative.split("/")
                if any(part in ("", ".", "..") for part in parts) or relative == MANIFEST:
                    raise StagingError(
                        f"object {key!r} under {target.where} cannot be stored as a file "
                        "(empty, '.' or '..' path segment, or a reserved name); rename it"
                    )
                etag = str(item.get("ETag", "")).strip('"')
                objects[relative] = _Object(key=key, size=int(item["Size"]), etag=etag)
    except (ClientError, BotoCoreError) as exc:
        raise _failure(target, exc, "listing") from exc
    if not objects:
        raise StagingError(
            f"no objects under {target.where}; check the path (the model is a folder holding "
            "config.json, weights and tokenizer files)"
        )
    return objects


def _manifest_matches(folder: Path, objects: dict[str, _Object]) -> bool:
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


def _version(objects: dict[str, _Object]) -> str:
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


def _link(source: Path | None, path: Path, obj: _Object) -> bool:
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


def _verify(path: Path, obj: _Object) -> None:
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
def _locked(lock_path: Path, wait: bool = True) -> Iterator[bool]:
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
    target: _Target,
    objects: dict[str, _Object],
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
            raise _failure(target, exc, f"downloading {obj.key!r} from") from exc
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
    target = _resolve(source)
    key = cache_key(source)
    cache_root = Path(cache_root)
    try:
        cache_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _failure(target, exc, "preparing the cache for") from exc
    client = _client(target, concurrency)
    with _locked(cache_root / f"{key}.lock"):
        # Whoever held the lock before may have crashed mid-stage; its leftovers are ours now.
        _clean_stale(cache_root, key)
        objects = _list(client, target)
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
            raise _failure(target, exc, "staging") from exc
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
        with _locked(cache_root / f"{key}.lock", wait=False) as held:
            if not held:
                log.info("prune: %s is being staged; left for the next prune", key)
                continue
            _clean_stale(cache_root, key)
            now = time.time_ns()
            for copy in _copies(cache_root, key)[1:]:
                if copy.name in used or now - _mtime(copy) < min_age * 1e9:
                    continue
                aside = Path(tempfile.mkdtemp(prefix=f".{key}.old-", dir=cache_root))
                try:
                    os.rename(copy, aside / "model")
                except OSError as exc:
                    log.warning("prune: cannot remove %s: %s", copy, exc)
                    continue
                finally:
                    shutil.rmtree(aside, ignore_errors=True)
                log.info("prune: removed %s, which no instance uses", copy)
                removed.append(copy)
    return removed
