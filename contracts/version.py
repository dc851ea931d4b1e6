"""Wharf's version, as pyproject.toml states it (the project is run from its checkout)."""

from __future__ import annotations

import tomllib
from pathlib import Path

VERSION: str = tomllib.loads(
    (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
)["project"]["version"]
