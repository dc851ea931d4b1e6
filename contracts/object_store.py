"""Where a model's objects are and how to read them: OSS / OBS / S3 URIs, endpoints, regions and
credentials resolved from the spec and the environment, one boto3 client for all three (Alibaba
OSS and Huawei OBS speak the S3 API; only the defaults differ), the listing of a prefix, and
errors that say what to fix without a secret in them. The node cache (workers.models.storage) is
built on it, and so is the control plane's store of batch files (controlplane.batches.files),
which is why it lives below both planes. The caller holds the client it makes.

Environment (per scheme, `<SCHEME>` is OSS, OBS or S3; entries in the spec win):
    WHARF_<SCHEME>_ENDPOINT, WHARF_<SCHEME>_ACCESS_KEY_ID, WHARF_<SCHEME>_ACCESS_KEY_SECRET,
    WHARF_<SCHEME>_ADDRESSING_STYLE (virtual|path|auto), WHARF_<SCHEME>_REGION
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

log = logging.getLogger(__name__)

# The cache's own file in a staged folder (workers.models.storage); no object may take its name.
MANIFEST = ".wharf-manifest.json"
_URI = re.compile(
    r"^(?P<scheme>oss|obs|s3)://(?P<bucket>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<rest>/.*)?$"
)
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
class Target:
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


def resolve(source: ObjectSource) -> Target:
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
    return Target(
        scheme=scheme,
        bucket=bucket,
        prefix=prefix,
        endpoint=endpoint,
        region=region,
        addressing_style=style,
        access_key_id=filled.access_key_id,
        access_key_secret=filled.access_key_secret,
    )


def make_client(target: Target, concurrency: int) -> Any:
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


def _plain(code: str) -> str:
    """An error code as S3 servers spell them (letters, digits, dots), at most 64 characters;
    anything else is not repeated."""
    return code if re.fullmatch(r"[A-Za-z0-9.]{1,64}", code) else ""


def failure(target: Target, exc: BaseException, doing: str) -> StagingError:
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
            # The code and status only: the server's own text is whatever an endpoint chose
            # to answer, and events must never carry a remote body back to the tenant.
            message = f"{doing} {where} failed: {_plain(code) or status}"
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
class StoredObject:
    key: str  # full object key
    size: int
    etag: str  # without quotes


def list_objects(client: Any, target: Target) -> dict[str, StoredObject]:
    """Every object under the prefix, by path relative to it (a POSIX relative path)."""
    objects: dict[str, StoredObject] = {}
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
                objects[relative] = StoredObject(key=key, size=int(item["Size"]), etag=etag)
    except (ClientError, BotoCoreError) as exc:
        raise failure(target, exc, "listing") from exc
    if not objects:
        raise StagingError(
            f"no objects under {target.where}; check the path (the model is a folder holding "
            "config.json, weights and tokenizer files)"
        )
    return objects
