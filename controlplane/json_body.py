"""The API's JSON bodies, bounded: a size and a nesting depth no real request comes near.

DRF's own JSONParser reads a body of any size and lets a deeply nested one raise
RecursionError, which became a 500. Here a body over MAX_BODY_BYTES is a 413 and one nested
deeper than MAX_DEPTH a 400, before any view sees it.
"""

from __future__ import annotations

import codecs
import json
from typing import Any

from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser

MAX_BODY_BYTES = 1024 * 1024  # a spec is a few KiB; its longest field (a script) is 64 KiB
MAX_DEPTH = 32  # a spec nests 5 levels deep


class BodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = f"The body is larger than {MAX_BODY_BYTES // 1024} KiB."
    default_code = "body_too_large"


def depth(value: Any) -> int:
    """How deeply JSON containers nest in value (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in children)
    return deepest


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        raw = stream.read(MAX_BODY_BYTES + 1) if stream is not None else b""
        if len(raw) > MAX_BODY_BYTES:
            raise BodyTooLarge()
        try:
            data = json.loads(codecs.decode(raw, encoding), parse_constant=_no_constants)
        except RecursionError:
            raise exceptions.ParseError(f"JSON nested more than {MAX_DEPTH} levels") from None
        except ValueError as exc:  # also UnicodeDecodeError and over-long integers
            raise exceptions.ParseError(f"JSON parse error: {exc}") from None
        if depth(data) > MAX_DEPTH:
            raise exceptions.ParseError(f"JSON nested more than {MAX_DEPTH} levels")
        return data


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")
