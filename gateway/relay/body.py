"""A generation request's body: read with a size cap, parsed once, the fields we read checked.

The gateway reads few fields: `model` (which service), `stream` and `stream_options` (to ask
for the usage event), `max_tokens` / `max_completion_tokens` (`max_output_tokens` for the
Responses API) times `n` or `best_of` (the sequences generated: charged against the token
limits, and overridden for a prefill leg). Those must have the types OpenAI documents, so
that what the gateway makes of them is what the engine will: `"stream": "yes"` would be a
stream to the engine but not to the gateway. Every other field goes through untouched, for
the engine to validate.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from contracts.engine_routes import GENERATION, RESPONSES

# Tool schemas and multimodal content nest a few levels; no real request comes near this.
MAX_DEPTH = 64
# Longer than any served model name, local paths included.
MAX_MODEL_LENGTH = 1024
# Above any context window, and small enough to keep the token limits' sums exact.
MAX_TOKENS = 2**31 - 1
# Admission charges prompt + max_tokens against a key's tokens per minute; without a
# max_tokens, OpenAI's completions default. The real usage replaces the estimate afterwards.
DEFAULT_MAX_TOKENS = 16
# Sequences one request may generate (`n`, `best_of`): OpenAI's bound on n.
MAX_CHOICES = 128
_INCLUDE_USAGE = b'"stream_options":{"include_usage":true},'


@dataclass(frozen=True)
class Invalid:
    """Why a body is refused: OpenAI's error code, the field at fault (None: the whole body)."""

    code: str
    message: str
    param: str | None = None
    status: int = 400


async def read(request: Request, limit: int) -> bytes | Invalid:
    """The whole body, or a 413 as soon as it is known to exceed `limit` bytes."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        return _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def parse(body: bytes, *, model_required: bool) -> dict[str, Any] | Invalid:
    """The body as a JSON object whose read fields are well typed, or why it is not."""
    try:
        # UTF-8 only (RFC 8259): ask_for_usage edits the bytes as UTF-8.
        data = json.loads(body.decode())
    except RecursionError:  # the json module's own nesting limit (about 1,000 levels)
        return _too_deep()
    except ValueError:  # not UTF-8, not JSON, or an integer of over 4,300 digits
        data = None
    if not isinstance(data, dict):
        return Invalid(
            "invalid_json",
            "The request body must be a JSON object in UTF-8, e.g. "
            '{"model": "<model>", "prompt": "Hello"}.',
        )
    # Nesting deeper than MAX_DEPTH needs more brackets than that: counting them (in C) spares
    # walking the parsed body of nearly every request.
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and _deeper_than(data, MAX_DEPTH):
        return _too_deep()
    invalid = check_fields(data, model_required=model_required)
    # Python's json reads NaN and Infinity; RFC 8259 has no such values, and an engine may fail
    # on them with a 500 (its answer cannot even be written as JSON). The walk is only for the
    # rare body that spells one.
    if invalid is None and (b"NaN" in body or b"Infinity" in body):
        where = _not_finite(data, "")
        if where is not None:
            named = where or '""'  # a field named with the empty string
            message = f"{named}: NaN and Infinity are not JSON values (RFC 8259); send a number."
            return Invalid("invalid_json", message, where)
    return invalid or data


def _not_finite(value: Any, where: str) -> str | None:
    """Where in `value` a NaN or an infinity is (`a.b[2]`), if anywhere."""
    if isinstance(value, float):
        return None if math.isfinite(value) else where
    if isinstance(value, dict):
        items = ((f"{where}.{key}" if where else key, item) for key, item in value.items())
    elif isinstance(value, list):
        items = ((f"{where}[{i}]", item) for i, item in enumerate(value))
    else:
        return None
    for path, item in items:
        if (found := _not_finite(item, path)) is not None:
            return found
    return None


def check_fields(data: dict[str, Any], *, model_required: bool) -> Invalid | None:
    """The first field the gateway reads whose value is wrong, if any."""
    if model_required:
        invalid = _check_model(data.get("model"))
        if invalid is not None:
            return invalid
    options = data.get("stream_options")
    return (
        _check_type("stream", data.get("stream"), bool)
        or _check_type("stream_options", options, dict)
        or (
            _check_type("stream_options.include_usage", options.get("include_usage"), bool)
            if isinstance(options, dict)
            else None
        )
        or _check_count("max_tokens", data.get("max_tokens"))
        or _check_count("max_completion_tokens", data.get("max_completion_tokens"))
        or _check_count("max_output_tokens", data.get("max_output_tokens"))
        or _check_count("n", data.get("n"), low=1, high=MAX_CHOICES)
        or _check_count("best_of", data.get("best_of"), low=1, high=MAX_CHOICES)
    )


def completion_budget(data: dict[str, Any] | None, kind: str = GENERATION) -> int:
    """The completion tokens to charge in advance: what the request allows for each sequence
    (else the default), times the sequences a generation makes (`best_of` of them, of which
    `n` are returned)."""
    names = ("max_output_tokens",) if kind == RESPONSES else ("max_tokens", "max_completion_tokens")
    data = data or {}
    budget = DEFAULT_MAX_TOKENS
    for name in names:
        value = data.get(name)
        if type(value) is int and value > 0:
            budget = value
            break
    if kind == GENERATION:
        budget *= max(_positive(data.get("n")), _positive(data.get("best_of")))
    return budget


def _positive(value: Any) -> int:
    return value if type(value) is int and value > 0 else 1


def ask_for_usage(data: dict[str, Any], body: bytes) -> tuple[bytes, bool]:
    """The body with stream_options.include_usage set for a stream, and whether we set it.

    Usage is only in a stream's last event if asked for. Without stream_options the
    setting is spliced into the bytes (no re-serializing); the event it brings is then
    stripped from what the client receives.
    """
    if data.get("stream") is not True:
        return body, False
    options = data.get("stream_options")
    if options is not None and options.get("include_usage"):
        return body, False
    if "stream_options" not in data:
        at = body.index(b"{") + 1
        return body[:at] + _INCLUDE_USAGE + body[at:], True
    merged = {**(options or {}), "include_usage": True}
    return json.dumps({**data, "stream_options": merged}).encode(), True


def _deeper_than(data: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` levels (the body is level 1)."""
    level, depth = [data], 1
    while level:
        if depth > limit:
            return True
        nested: list[Any] = []
        for container in level:
            values = container.values() if type(container) is dict else container
            # Exact type tests in a comprehension: twice as fast as isinstance in a generator.
            nested += [v for v in values if type(v) is dict or type(v) is list]
        level, depth = nested, depth + 1
    return False


def _check_model(model: Any) -> Invalid | None:
    if model is None or model == "":
        return Invalid(
            "missing_model",
            "The request body needs a 'model' field naming the service or one of its served "
            "model names; GET /v1/models lists the models your token can call.",
            "model",
        )
    invalid = _check_type("model", model, str)
    if invalid is not None:
        return invalid
    if len(model) > MAX_MODEL_LENGTH:
        return Invalid(
            "string_above_max_length",
            f"Invalid 'model': string too long. Expected at most {MAX_MODEL_LENGTH} "
            f"characters, but got {len(model)}; GET /v1/models lists the models you can call.",
            "model",
        )
    try:
        model.encode()  # error messages quote it, in UTF-8
    except UnicodeEncodeError:
        return Invalid(
            "invalid_value",
            "Invalid 'model': it contains an unpaired surrogate escape (such as \\ud800), "
            "which names no model.",
            "model",
        )
    return None


def _check_type(param: str, value: Any, expected: type) -> Invalid | None:
    """None (JSON null, or absent) passes, as in OpenAI's API; bool is not an int here."""
    if value is None or type(value) is expected:
        return None
    return Invalid(
        "invalid_type",
        f"Invalid type for '{param}': expected {_JSON_TYPES[expected]}, but got "
        f"{_JSON_TYPES.get(type(value), 'another type')} instead.",
        param,
    )


def _check_count(param: str, value: Any, low: int = 0, high: int = MAX_TOKENS) -> Invalid | None:
    invalid = _check_type(param, value, int)
    if invalid is not None or value is None:
        return invalid
    if value < low:
        return Invalid(
            "integer_below_min_value",
            f"Invalid '{param}': expected a value >= {low}, but got {value} instead.",
            param,
        )
    if value > high:
        return Invalid(
            "integer_above_max_value",
            f"Invalid '{param}': expected a value <= {high}, but got a larger one.",
            param,
        )
    return None


_JSON_TYPES: dict[type, str] = {
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "an array",
    dict: "an object",
}


def _too_deep() -> Invalid:
    return Invalid(
        "nesting_too_deep",
        f"The request body nests arrays and objects more than {MAX_DEPTH} levels deep; "
        "no OpenAI request needs that many. Send a flatter body.",
    )


def _too_large(limit: int) -> Invalid:
    return Invalid(
        "body_too_large",
        f"The request body is larger than the gateway's limit of {limit} bytes. Send a "
        "shorter prompt, or ask the operator to raise WHARF_GATEWAY_MAX_BODY_BYTES.",
        status=413,
    )
