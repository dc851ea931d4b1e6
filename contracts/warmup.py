"""EAS's `warm_up_data_path`: requests replayed to a new instance after its readiness passes
and before it is routed, so its first callers do not pay for cold caches (compiled graphs,
CUDA kernels, a loaded LoRA). The spec's field (`WarmUp`) and the file's format, pure.

The file is in the instance (a path its container sees, usually in a `storage` mount), JSON
Lines, one request per line, at most MAX_REQUESTS of them and MAX_BYTES in all:

    {"path": "/v1/completions", "body": {"model": "m", "prompt": "hi", "max_tokens": 8}}
    {"method": "GET", "path": "/v1/models"}
    {"prompt": "hello", "max_tokens": 4}          # a bare body: POSTed to the default path

(EAS's own warm-up files are its SDK's protobuf requests for its processors; an image
service's are its HTTP requests, which this is.) Blank lines and lines starting with `#` are
skipped; a line that is no request is counted, not replayed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, field_validator

from contracts.spec_fleet import _Strict

MAX_REQUESTS = 1000
MAX_BYTES = 8 * 1024 * 1024
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")


class WarmUp(_Strict):
    """The service spec's `warm_up_data_path`."""

    warm_up_data_path: str | None = Field(
        default=None, max_length=1024,
        description="A JSON Lines file in the instance of requests replayed to it before it "
        "is routed: {path, method, body} or a bare body.",
    )  # fmt: skip

    @field_validator("warm_up_data_path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or ".." in value.split("/")):
            raise ValueError("an absolute path in the instance, without '..'")
        return value


@dataclass(frozen=True)
class Replay:
    method: str
    path: str
    body: Any = None  # JSON, or None for no body


@dataclass(frozen=True)
class WarmUpFile:
    requests: list[Replay] = field(default_factory=list)
    unreadable: int = 0  # lines that were no request
    cut: bool = False  # more than MAX_REQUESTS: the rest is not replayed


def read_warm_up(text: str, default_path: str) -> WarmUpFile:
    """The requests of a warm-up file; a bare body goes to `default_path` (POST)."""
    requests: list[Replay] = []
    unreadable = 0
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if len(requests) == MAX_REQUESTS:
            return WarmUpFile(requests, unreadable, cut=True)
        try:
            item = json.loads(line)
        except ValueError:
            unreadable += 1
            continue
        replay = _replay(item, default_path)
        if replay is None:
            unreadable += 1
        else:
            requests.append(replay)
    return WarmUpFile(requests, unreadable)


def _replay(item: Any, default_path: str) -> Replay | None:
    if not isinstance(item, dict):
        return None
    if "path" not in item:
        return Replay("POST", default_path, item)  # a bare body
    path, method = item.get("path"), str(item.get("method", "POST")).upper()
    if not isinstance(path, str) or not path.startswith("/") or method not in METHODS:
        return None
    if set(item) - {"path", "method", "body"}:
        return None
    return Replay(method, path, item.get("body"))
