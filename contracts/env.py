"""Typed readers for environment variables, the only source of configuration.

Every variable read anywhere goes through these, and every one is listed in the
README's table.
"""

from __future__ import annotations

import os
from pathlib import Path


def envstr(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def envint(name: str, default: int, *, minimum: int | None = None) -> int:
    value = os.environ.get(name, "")
    if not value.strip():
        return default
    if minimum is None:
        return int(value)
    return _at_least(name, value, int, minimum, "a whole number")


def envfloat(name: str, default: float, *, minimum: float | None = None) -> float:
    value = os.environ.get(name, "")
    if not value.strip():
        return default
    if minimum is None:
        return float(value)
    return _at_least(name, value, float, minimum, "a number")


def _at_least(name: str, value: str, kind, minimum, what: str):
    """`value` as `kind`, refused with a message naming the variable below `minimum`."""
    try:
        number = kind(value)
    except ValueError:
        number = None
    if number is None or not number >= minimum:
        raise ValueError(f"{name} must be {what} of at least {minimum}, not {value!r}")
    return number


def envrange(name: str, default: tuple[int, int]) -> tuple[int, int]:
    """`LOW-HIGH`, both included, as (low, high)."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    low, dash, high = value.partition("-")
    if not (dash and low.strip().isdecimal() and high.strip().isdecimal()):
        raise ValueError(f"{name} must be a range LOW-HIGH such as 30000-32767, not {value!r}")
    if not 0 < int(low) <= int(high) < 65536:
        raise ValueError(f"{name}: {value!r} is not a range of TCP ports")
    return int(low), int(high)


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    return value in ("1", "true", "yes", "on")


def secret(name: str, default: str = "") -> str:
    """A secret from NAME, or from the file that NAME_FILE points at (Docker/K8s secrets)."""
    if os.environ.get(name):
        return os.environ[name]
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return default
