"""A benchmark run as POST /api/v1/services/<name>/benchmarks takes it, checked field by field.

Pure: a JSON value in, a Run out, or InvalidRunError naming every bad field (`rows[3].ttft_ms_p50`).
The figures' names are the contract with `wharf bench` (wharfcli/bench/figures.py writes the
same ones; a test holds the two lists equal) and with the console's chart, which reads
output_throughput and ttft_ms_p50 against parallel_num or request_rate. Every size is bounded:
a run is at most MAX_ROWS points, and its parameters are a small flat object.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

KINDS = ("static", "dynamic")
# What a row's point is: a concurrency and a length pair, or a request rate and a prompt count.
POINT_FIELDS = {
    "static": ("parallel_num", "prompt_tokens", "output_tokens"),
    "dynamic": ("request_rate", "num_prompts"),
}
COUNT_FIGURES = ("requests", "failed", "token_mismatches")
RATE_FIGURES = ("duration_s", "request_throughput", "output_throughput", "total_throughput")
# None when no request succeeded (and TPOT when every output was a single token).
TIMING_FIGURES = tuple(
    f"{what}_{stat}" for what in ("latency_ms", "ttft_ms", "tpot_ms")
    for stat in ("avg", "p50", "p90", "p99")
)  # fmt: skip
NULLABLE_FIGURES = ("mean_prompt_tokens", "mean_output_tokens", *TIMING_FIGURES)
FIGURES = (*COUNT_FIGURES, *RATE_FIGURES, *NULLABLE_FIGURES)
BODY_FIELDS = ("kind", "parameters", "rows")

MAX_ROWS = 500
MAX_PARAMETERS = 40
MAX_LIST = 100  # items in one parameter's list (e.g. --parallel-num 1 2 4 8)
MAX_TEXT = 500
MAX_FIGURE = 1e12  # a figure past it is a bug in the client, not a measurement
MAX_INT = 2**31 - 1
MAX_RATE = 1e6
MAX_ERRORS = 50  # named in one answer; a body that bad needs fixing at its source anyway
PARAMETER_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")

Errors = dict[str, list[str]]


class InvalidRunError(ValueError):
    def __init__(self, errors: Errors) -> None:
        super().__init__(errors)
        self.errors = errors


@dataclass(frozen=True)
class Run:
    kind: str
    parameters: dict[str, Any]
    rows: list[dict[str, Any]]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_text(value: Any) -> bool:
    return (
        isinstance(value, str)
        and len(value) <= MAX_TEXT
        and not any(unicodedata.category(c) in ("Cc", "Cs") for c in value)
    )


def _scalar_error(value: Any) -> str | None:
    if value is None or isinstance(value, bool) or _is_number(value) or _is_text(value):
        return None
    return f"must be a number, a string of at most {MAX_TEXT} characters, true, false or null"


def _parameters(value: Any, errors: Errors) -> dict[str, Any]:
    if not isinstance(value, dict):
        errors["parameters"] = ["must be an object of the options the run used"]
        return {}
    if len(value) > MAX_PARAMETERS:
        errors["parameters"] = [f"at most {MAX_PARAMETERS} options"]
        return {}
    for name, item in value.items():
        if not PARAMETER_NAME.fullmatch(name):
            errors["parameters"] = [f"{name[:64]!r}: names are lowercase words joined by _"]
            continue
        items = item if isinstance(item, list) else [item]
        if len(items) > MAX_LIST:
            errors[f"parameters.{name}"] = [f"at most {MAX_LIST} values"]
        elif message := next(filter(None, map(_scalar_error, items)), None):
            errors[f"parameters.{name}"] = [message]
    return value


def _figure_error(field: str, value: Any) -> str | None:
    if value is None:
        return None if field in NULLABLE_FIGURES else "is required (not null)"
    if field in COUNT_FIGURES or field in ("parallel_num", "prompt_tokens", "output_tokens",
                                           "num_prompts"):  # fmt: skip
        low = 0 if field in COUNT_FIGURES else 1
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_INT:
            return f"must be a whole number from {low} to {MAX_INT}"
        return None
    if field == "request_rate":
        if not _is_number(value) or not 0 < value <= MAX_RATE:
            return f"must be a number above 0 and at most {MAX_RATE:g} (requests per second)"
        return None
    if not _is_number(value) or not 0 <= value <= MAX_FIGURE:
        return f"must be a number from 0 to {MAX_FIGURE:g}"
    return None


def _row(index: int, row: Any, kind: str, errors: Errors) -> None:
    where = f"rows[{index}]"
    if not isinstance(row, dict):
        errors[where] = ["must be an object of a point's figures"]
        return
    fields = (*POINT_FIELDS[kind], *FIGURES)
    for name in row:
        if name not in fields:
            errors[f"{where}.{str(name)[:64]}"] = [f"unknown figure for a {kind} run"]
    for name in fields:
        if name not in row:
            errors[f"{where}.{name}"] = ["is missing"]
        elif message := _figure_error(name, row[name]):
            errors[f"{where}.{name}"] = [message]


def _rows(value: Any, kind: str | None, errors: Errors) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        errors["rows"] = ["must be a list of one row of figures per point"]
        return []
    if len(value) > MAX_ROWS:
        errors["rows"] = [f"at most {MAX_ROWS} points in one run"]
        return []
    if kind is not None:
        for index, row in enumerate(value):
            _row(index, row, kind, errors)
            if len(errors) >= MAX_ERRORS:
                break
    return value


def parse_run(body: Any) -> Run:
    """The run the body describes; InvalidRunError naming every bad field (at most MAX_ERRORS)."""
    if not isinstance(body, dict):
        raise InvalidRunError({"body": ['must be an object: {"kind", "parameters", "rows"}']})
    errors: Errors = {}
    for name in body:
        if name not in BODY_FIELDS:
            errors[str(name)[:64]] = [f"unknown field; a run takes {', '.join(BODY_FIELDS)}"]
    kind = body.get("kind")
    if kind not in KINDS:
        errors["kind"] = [f"must be one of {', '.join(KINDS)}"]
        kind = None
    parameters = _parameters(body.get("parameters"), errors)
    rows = _rows(body.get("rows"), kind, errors)
    if errors:
        raise InvalidRunError(dict(list(errors.items())[:MAX_ERRORS]))
    assert kind is not None
    return Run(kind=kind, parameters=parameters, rows=rows)
