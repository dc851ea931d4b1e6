"""Where the batches' files are kept (uploads, output and error files), behind one small
interface with two stores: a folder, WHARF_BATCH_DIR (the embedded default), or an S3-compatible
bucket when WHARF_BATCH_STORE names one (`s3://bucket/prefix`, `oss://…`, `obs://…`; endpoint,
region, addressing style and keys from WHARF_<SCHEME>_*, resolved by contracts.object_store as
for models).

A file is named `<workspace>/<file id>` under the folder or the prefix, so one workspace's files
are never under another's. A write lands whole or not at all: the folder's through a partial
file renamed into place, the bucket's because an object (or a multipart upload, which boto3
aborts on failure) appears only when complete. Uploads and downloads stream in chunks. A store
that cannot be reached or refuses is StoreUnavailable, a 503 that names the store (its URI and
endpoint, never a credential) and the setting to check.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
)
from django.conf import settings

from contracts.object_store import StagingError, Target, make_client, resolve, source_from_env
from controlplane.queues.store import QueueRefusal

log = logging.getLogger(__name__)

CHUNK = 64 * 1024
# One part in memory at a time: an upload costs 8 MiB of the API's memory, whatever its size.
_TRANSFER = TransferConfig(use_threads=False, multipart_chunksize=8 * 1024 * 1024)


class StoreUnavailable(QueueRefusal):  # noqa: N818 (answered as a 503)
    """The store could not be read or written; the message says which and what to check."""

    def __init__(self, message: str) -> None:
        super().__init__(503, message)


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class Content:
    """A file's bytes as chunks to stream, and how many there are."""

    chunks: Iterator[bytes]
    size: int


class BatchFiles(Protocol):
    where: str  # the store as error messages name it

    def write(self, name: str, source: Readable) -> None: ...
    def open(self, name: str) -> Content: ...
    def read(self, name: str) -> bytes: ...
    def delete(self, name: str) -> None: ...


def _missing(name: str) -> QueueRefusal:
    return QueueRefusal(404, f"the content of {name.rpartition('/')[2]} is gone from the store")


class FolderFiles:
    """Files under a folder of this host (WHARF_BATCH_DIR)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.where = f"the folder {root} (WHARF_BATCH_DIR)"

    def _unavailable(self, exc: OSError, doing: str) -> StoreUnavailable:
        return StoreUnavailable(f"cannot {doing} {self.where}: {exc.strerror or exc}")

    def _guarded(self, doing: str, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except OSError as exc:
            raise self._unavailable(exc, doing) from exc

    def write(self, name: str, source: Readable) -> None:
        """A partial file renamed into place once whole; a failure leaves none. Only the
        folder's errors are the store's (a 503): the source's own (a client gone) stay its."""
        path = self.root / name
        partial = path.with_name(f".{path.name}.part")
        doing = "write a file in"
        try:
            self._guarded(doing, path.parent.mkdir, 0o777, True, True)
            with self._guarded(doing, partial.open, "wb") as out:
                while chunk := source.read(CHUNK):
                    self._guarded(doing, out.write, chunk)
                self._guarded(doing, out.flush)
            self._guarded(doing, os.replace, partial, path)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise

    def open(self, name: str) -> Content:
        try:
            handle = (self.root / name).open("rb")
        except FileNotFoundError as exc:
            raise _missing(name) from exc
        except OSError as exc:
            raise self._unavailable(exc, "read") from exc
        return Content(_chunks_of(handle), os.fstat(handle.fileno()).st_size)

    def read(self, name: str) -> bytes:
        return b"".join(self.open(name).chunks)

    def delete(self, name: str) -> None:
        try:
            (self.root / name).unlink(missing_ok=True)
        except OSError as exc:
            raise self._unavailable(exc, "delete a file in") from exc


def _chunks_of(handle: Any) -> Iterator[bytes]:
    with handle:
        while chunk := handle.read(CHUNK):
            yield chunk


class BucketFiles:
    """Objects under a bucket's prefix (WHARF_BATCH_STORE)."""

    def __init__(self, target: Target, client: Any) -> None:
        self.target, self.client = target, client
        self.where = f"the batch file store {target.where} (WHARF_BATCH_STORE)"

    def _key(self, name: str) -> str:
        return f"{self.target.prefix}{name}"

    def write(self, name: str, source: Readable) -> None:
        try:
            self.client.upload_fileobj(
                source, self.target.bucket, self._key(name), Config=_TRANSFER
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable(exc, "writing to") from exc

    def open(self, name: str) -> Content:
        try:
            found = self.client.get_object(Bucket=self.target.bucket, Key=self._key(name))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise _missing(name) from exc
            raise self._unavailable(exc, "reading") from exc
        except BotoCoreError as exc:
            raise self._unavailable(exc, "reading") from exc
        return Content(found["Body"].iter_chunks(CHUNK), int(found["ContentLength"]))

    def read(self, name: str) -> bytes:
        content = self.open(name)
        try:
            return b"".join(content.chunks)
        except BotoCoreError as exc:
            raise self._unavailable(exc, "reading") from exc

    def delete(self, name: str) -> None:
        try:
            self.client.delete_object(Bucket=self.target.bucket, Key=self._key(name))
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable(exc, "deleting from") from exc

    def _unavailable(self, exc: Exception, doing: str) -> StoreUnavailable:
        return StoreUnavailable(unavailable_message(self.target, exc, doing))


def unavailable_message(target: Target, exc: Exception, doing: str) -> str:
    """What went wrong with the bucket, in words an operator acts on; the server's own text
    and the keys are never repeated."""
    where = f"the batch file store {target.where} (WHARF_BATCH_STORE)"
    keys = f"WHARF_{target.scheme.upper()}_ACCESS_KEY_ID / _ACCESS_KEY_SECRET"
    if isinstance(exc, EndpointConnectionError | ConnectTimeoutError):
        message = (
            f"cannot reach {where}; check WHARF_{target.scheme.upper()}_ENDPOINT and that "
            "the API host can reach it"
        )
    elif isinstance(exc, NoCredentialsError):
        message = f"no credentials for {where}; set {keys}"
    elif isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        shown = code if code.isalnum() and len(code) <= 64 else str(status)
        message = f"{where} refused {doing} it ({shown}); check the bucket and {keys}"
    else:
        message = f"{doing} {where} failed ({type(exc).__name__}); try again"
    if target.access_key_secret:  # a server could echo anything back
        message = message.replace(target.access_key_secret, "******")
    return message


@lru_cache(maxsize=4)
def _client(target: Target) -> Any:
    return make_client(target, concurrency=4)


def configured() -> BatchFiles:
    """The store the settings name: the bucket of WHARF_BATCH_STORE, else the folder."""
    uri = settings.WHARF_BATCH_STORE
    if not uri:
        return FolderFiles(Path(settings.WHARF_BATCH_DIR))
    try:
        target = resolve(source_from_env(uri))
    except StagingError as exc:
        raise StoreUnavailable(f"WHARF_BATCH_STORE: {exc}") from exc
    return BucketFiles(target, _client(target))


def discard(name: str) -> None:
    """Remove what a write that did not count left behind; a store that fails is logged (the
    object is then an orphan the operator may remove), the first failure stays the answer."""
    try:
        configured().delete(name)
    except StoreUnavailable as exc:
        log.warning("could not remove the batch file %s: %s", name, exc.message)
