"""Checks of single request values, shared by the keys and usage APIs: each a pure function
that returns the value it accepts or raises ValueError with a message for the user.

Every value has a bound that every part downstream can hold: PostgreSQL (no NUL in text,
integer columns of 32 bits), Python's datetime (years 1 to 9999, also after the offset is
taken off) and the JSON renderer (no lone surrogates).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime

MAX_INT = 2**31 - 1  # the ceiling of a PositiveIntegerField on every database Django supports
# Timestamps: nothing the gateways count is older than the epoch, and a year of headroom
# under datetime's ceiling keeps arithmetic on them (ranges, offsets) from overflowing.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)
MAX_TIMESTAMP_LENGTH = 64  # 2030-01-31T00:00:00.000000+00:00 is 32
MAX_ECHO = 64  # characters of a user's unknown field name repeated in an error
ISO_8601 = "an ISO 8601 date and time, e.g. 2030-01-31T00:00:00Z"
# Cc: control characters (NUL cannot be stored in PostgreSQL text); Cs: lone surrogates
# (JSON allows "\ud800", but it cannot be encoded as UTF-8 to be stored or answered).
_UNPRINTABLE = frozenset({"Cc", "Cs"})


def positive_int(value: Any) -> int:
    # bool is an int in Python, but `true` is never a limit anyone meant
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT:
        raise ValueError(f"must be a whole number from 1 to {MAX_INT}")
    return value


def text(value: Any, max_length: int, what: str = "a string") -> str:
    """A string of 1 to `max_length` characters, none of them a control character."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be {what}")
    if len(value) > max_length:
        raise ValueError(f"at most {max_length} characters")
    if any(unicodedata.category(char) in _UNPRINTABLE for char in value):
        raise ValueError("must not contain control characters")
    return value


def timestamp(value: Any) -> datetime:
    """An ISO 8601 date and time from EARLIEST up to LATEST (naive times are UTC)."""
    if not isinstance(value, str) or len(value) > MAX_TIMESTAMP_LENGTH:
        raise ValueError(ISO_8601)
    try:
        parsed = parse_datetime(value)
    except ValueError:  # well formed but impossible, e.g. February 30th or an offset of 25h
        parsed = None
    if parsed is None:
        raise ValueError(ISO_8601)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        in_range = EARLIEST <= parsed.astimezone(UTC) < LATEST
    except OverflowError:  # 9999-12-31T23:59:59-14:00 is in year 10000 in UTC
        in_range = False
    if not in_range:
        raise ValueError(f"must be from {EARLIEST:%Y-%m-%d} to {LATEST:%Y-%m-%d} (UTC)")
    return parsed


def echo(name: str) -> str:
    """A user's field or parameter name, safe to repeat in an error: short, and encodable."""
    safe = name.encode("utf-8", "backslashreplace").decode()
    return safe if len(safe) <= MAX_ECHO else f"{safe[:MAX_ECHO]}…"


def parameter_errors(params: Any, known: Iterable[str]) -> dict[str, list[str]]:
    """Errors for the query parameters (a QueryDict) that are unknown or given twice: a
    misspelt filter would otherwise be ignored and answer with everything."""
    known = tuple(known)
    takes = f"this endpoint takes {', '.join(known)}" if known else "this endpoint takes none"
    errors: dict[str, list[str]] = {}
    for name, values in params.lists():
        if name not in known:
            errors[echo(name)] = [f"unknown parameter; {takes}"]
        elif len(values) > 1:
            errors[name] = ["given more than once"]
    return errors
