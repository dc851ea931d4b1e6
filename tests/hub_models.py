"""The tiny model's files, as a fake hub serves them (tests.hub_fake)."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from controlplane.services.tiny_model import write_tiny_model


@functools.cache
def tiny_files() -> dict[str, bytes]:
    """{name: bytes} of the tiny model the project writes (config, tokenizer, weights)."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = write_tiny_model(Path(scratch) / "tiny")
        return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}
