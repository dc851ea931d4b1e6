"""Stage a model folder from OSS / OBS / S3 into the node-local cache.

Alibaba OSS and Huawei OBS speak the S3 API, so one boto3 client covers all three schemes;
only the defaults differ (addressing style, region, anonymous access). `stage()` copies every
object under a prefix into `cache_root/<cache_key>` and returns that folder, ready to mount
into an engine container as its model directory.

Guarantees:
- The cache folder appears atomically (downloaded into a temp dir, verified, renamed), so an
  engine never sees a half-copied model, and a failed stage leaves nothing behind.
- A later stage of an unchanged source re-lists the bucket and downloads nothing.
- Workers staging the same source at once serialise on `cache_root/<cache_key>.lock`; the
  second one finds the first one's result and returns it.
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
import tempfile
import threading
from collections.abc import Callable, Iterator
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
def _locked(lock_path: Path) -> Iterator[None]:
    # The lock file stays: unlinking it would let a third worker lock a fresh inode while the
    # second still waits on the old one.
    with lock_path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _download(
    client: Any,
    target: _Target,
    objects: dict[str, _Object],
    folder: Path,
    config: TransferConfig,
    progress: _Progress,
) -> None:
    for rel, obj in sorted(objects.items()):
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
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
    """Copy the model folder at `source` into `cache_root/<cache_key>` and return that path.

    Blocks while another worker stages the same source, then reuses its result. Re-lists the
    bucket every time: an unchanged source downloads nothing, a changed one is re-staged into
    a fresh folder that replaces the old one. `progress(done_bytes, total_bytes)` is called
    from download threads, at most about a hundred times, and always ends at total (also
    on a cache hit, with no download).
    Raises StagingError; the previous cache entry (if any) is then left as it was.
    """
    target = _resolve(source)
    key = cache_key(source)
    cache_root = Path(cache_root)
    try:
        cache_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _failure(target, exc, "preparing the cache for") from exc
    final = cache_root / key
    client = _client(target, concurrency)
    with _locked(cache_root / f"{key}.lock"):
        # Whoever held the lock before may have crashed mid-stage; its leftovers are ours now.
        for stale in cache_root.glob(f".{key}.*"):
            shutil.rmtree(stale, ignore_errors=True)
        objects = _list(client, target)
        total = sum(o.size for o in objects.values())
        if final.is_dir() and _manifest_matches(final, objects):
            log.info("staging %s: cache is current at %s", target.where, final)
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
        old: Path | None = None
        try:
            _download(client, target, objects, temp, config, counter)
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
            if final.exists():
                # rename() cannot replace a non-empty directory: move the old one aside first.
                # Under the lock nobody else swaps, so the gap between the renames is ours.
                old = Path(tempfile.mkdtemp(prefix=f".{key}.old-", dir=cache_root))
                os.rename(final, old / "model")
            try:
                os.rename(temp, final)
            except OSError:
                if old is not None:  # put the previous copy back rather than lose it
                    os.rename(old / "model", final)
                raise
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
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        counter.finish()
        log.info("staged %s into %s", target.where, final)
        return final
