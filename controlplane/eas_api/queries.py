"""EAS's query parameters, read strictly: each one a call takes is acted on, a bad value or a
parameter the call does not take is a 400 naming it. Pure but for the error type."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from controlplane.eas_api.errors import EasError

MAX_PAGE_SIZE = 100


# Terraform's provider repeats the path's ClusterId in the query: taken, like the path's.
ALWAYS = ("ClusterId",)


def only(params: Mapping[str, str], known: Sequence[str]) -> None:
    if unknown := sorted(set(params) - set(known) - set(ALWAYS)):
        raise EasError(
            "InvalidParameter",
            f"{', '.join(unknown)}: not a parameter Wharf takes here (it takes "
            f"{', '.join(known) or 'none'})",
        )


def whole(params: Mapping[str, str], name: str, default: int, high: int) -> int:
    text = params.get(name)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= high):
        raise EasError("InvalidParameter", f"{name}: a whole number from 1 to {high}")
    return int(text)


def page(params: Mapping[str, str], items: Sequence[Any], number: str, size: str,
         default_size: int = 100) -> tuple[list, int, int]:  # fmt: skip
    """The page `params` asks for, with its number and size (EAS counts pages from 1)."""
    size_ = whole(params, size, default_size, MAX_PAGE_SIZE)
    number_ = whole(params, number, 1, 10**6)
    start = (number_ - 1) * size_
    return list(items[start : start + size_]), number_, size_


def flag(params: Mapping[str, str], name: str) -> bool:
    text = params.get(name, "false").lower()
    if text not in ("true", "false"):
        raise EasError("InvalidParameter", f"{name}: true or false")
    return text == "true"


def labels(params: Mapping[str, str], name: str) -> dict[str, str]:
    """A JSON object of label keys and values, as the SDK sends `Labels` and `Label`."""
    text = params.get(name)
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise EasError("InvalidParameter", f'{name}: a JSON object, e.g. {{"team": "search"}}')
    return value


def moment(params: Mapping[str, str], name: str) -> datetime | None:
    """A time, UTC: `2026-01-31 12:00:00` (EAS's form) or ISO 8601."""
    text = params.get(name)
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise EasError("InvalidParameter", f"{name}: a time like 2026-01-31 12:00:00") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)
