"""Which cards an instance holds, written as the scheduler records it (Instance.devices) and the
runtimes label it: "gpu:0,1"; "" when it holds none."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

KINDS = ("gpu", "npu")


def encode_allocation(kind: str, indexes: Iterable[int]) -> str:
    """ "gpu:0,1" for a Docker label or process state file; "" when the instance holds no
    cards (decode_allocation("") gives ("", ()))."""
    held = tuple(indexes)
    if not held:
        return ""
    if kind not in KINDS:
        raise ValueError(f"unknown device kind {kind!r}")
    if any(i < 0 for i in held):
        raise ValueError(f"device indexes must be >= 0, got {held}")
    return f"{kind}:{','.join(str(i) for i in held)}"


@lru_cache(maxsize=4096)  # a placing pass decodes every instance's: a fleet has few distinct
def decode_allocation(text: str) -> tuple[str, tuple[int, ...]]:
    """The inverse of encode_allocation. Raises ValueError on a malformed label rather than
    guessing: reading it as "holds nothing" could hand its cards to a second instance."""
    text = text.strip()
    if not text:
        return "", ()
    kind, sep, rest = text.partition(":")
    if not sep or kind not in KINDS:
        raise ValueError(f"malformed device allocation {text!r}; expected e.g. 'gpu:0,1'")
    try:
        indexes = tuple(int(part) for part in rest.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"malformed device indexes in {text!r}") from None
    if any(i < 0 for i in indexes):
        raise ValueError(f"negative device index in {text!r}")
    return kind, indexes
