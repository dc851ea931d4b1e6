"""OpenAI's Batch API as Wharf takes it (the gateway's /v1/files and /v1/batches, the control
plane's controlplane.batches): what an input line must hold, the output and error lines OpenAI
writes, and which status a batch may move to from which. Pure: no I/O.

A batch goes validating -> in_progress -> finalizing -> completed; it may instead end failed
(nothing in it could run), expired (its 24 h window passed first) or, once cancelled,
cancelling -> cancelled.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
COMPLETION_WINDOW = "24h"  # the only window OpenAI takes
WINDOW_S = 24 * 3600
PURPOSE = "batch"

VALIDATING, IN_PROGRESS, FINALIZING, COMPLETED = (
    "validating",
    "in_progress",
    "finalizing",
    "completed",
)
FAILED, EXPIRED, CANCELLING, CANCELLED = "failed", "expired", "cancelling", "cancelled"
TERMINAL = frozenset({COMPLETED, FAILED, EXPIRED, CANCELLED})
# Where a batch may go from each status.
MOVES: dict[str, frozenset[str]] = {
    VALIDATING: frozenset({IN_PROGRESS, FAILED, CANCELLING}),
    IN_PROGRESS: frozenset({FINALIZING, CANCELLING, EXPIRED}),
    FINALIZING: frozenset({COMPLETED, FAILED}),
    CANCELLING: frozenset({CANCELLED}),
    COMPLETED: frozenset(),
    FAILED: frozenset(),
    EXPIRED: frozenset(),
    CANCELLED: frozenset(),
}


def may_move(status: str, to: str) -> bool:
    return to in MOVES.get(status, frozenset())


def new_id(prefix: str) -> str:
    """OpenAI-looking ids: file-…, batch_…, batch_req_…."""
    return f"{prefix}{secrets.token_hex(12)}"


@dataclass(frozen=True)
class Line:
    """One request of a batch's input file that may run."""

    custom_id: str
    url: str
    model: str
    body: dict[str, Any]


@dataclass(frozen=True)
class LineError:
    """One line that may not: it goes to the error file with `code` and `message`."""

    number: int  # 1-based, as OpenAI's errors name lines
    custom_id: str
    code: str
    message: str


def read_line(number: int, text: str, endpoint: str) -> Line | LineError:
    """Line `number` of an input file, for a batch of `endpoint`. Which service serves its
    model is asked elsewhere (the control plane knows the key's services)."""
    try:
        data = json.loads(text)
    except ValueError:
        return LineError(number, "", "invalid_json_line", f"line {number} is not JSON")
    if not isinstance(data, dict):
        return LineError(number, "", "invalid_json_line", f"line {number} is not a JSON object")
    custom_id = data.get("custom_id")
    custom = custom_id if isinstance(custom_id, str) else ""
    for field, kind in (("custom_id", str), ("method", str), ("url", str), ("body", dict)):
        if not isinstance(data.get(field), kind) or data.get(field) in ("", {}):
            return LineError(
                number, custom, "missing_required_parameter",
                f"line {number}: `{field}` is required ({kind.__name__})",
            )  # fmt: skip
    if data["method"].upper() != "POST":
        return LineError(number, custom, "invalid_method", f"line {number}: method must be POST")
    if data["url"] != endpoint:
        return LineError(
            number, custom, "mismatched_endpoint",
            f"line {number}: url {data['url']} is not the batch's endpoint {endpoint}",
        )  # fmt: skip
    model = data["body"].get("model")
    if not isinstance(model, str) or not model:
        return LineError(number, custom, "missing_model", f"line {number}: body.model is required")
    return Line(custom, data["url"], model, data["body"])


def duplicate_ids(lines: list[Line]) -> list[str]:
    seen: set[str] = set()
    twice = []
    for line in lines:
        if line.custom_id in seen:
            twice.append(line.custom_id)
        seen.add(line.custom_id)
    return twice


def output_line(custom_id: str, status: int, request_id: str, body: bytes) -> dict[str, Any]:
    """OpenAI's output-file line for a request that ran (whatever its status code)."""
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        parsed = body.decode(errors="replace")
    return {
        "id": new_id("batch_req_"),
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": parsed},
        "error": None,
    }


def error_line(custom_id: str, code: str, message: str) -> dict[str, Any]:
    """OpenAI's error-file line for a request that did not run."""
    return {
        "id": new_id("batch_req_"),
        "custom_id": custom_id or None,
        "response": None,
        "error": {"code": code, "message": message},
    }


def batch_error(line: LineError) -> dict[str, Any]:
    """OpenAI's entry in a batch's `errors` for an input line that could not run."""
    return {"code": line.code, "message": line.message, "param": None, "line": line.number}


def usage_of(body: bytes) -> tuple[int, int]:
    """(prompt, completion) tokens an engine's OpenAI answer reports; (0, 0) without."""
    try:
        usage = json.loads(body).get("usage") or {}
        return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        return 0, 0


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)
