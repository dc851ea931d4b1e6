"""Typed readers for environment variables, the only source of configuration.

Every variable read anywhere goes through these, and every one is listed in the
README's table.
"""

from __future__ import annotations

import os
from pathlib import Path


def envstr(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def envint(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


def envfloat(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    return float(value) if value.strip() else default


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
