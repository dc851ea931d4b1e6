"""EAS's UpdateService `UpdateType=merge`, pure: the change merged into the spec as EAS writes
it (contracts.eas.written), so a change in any of EAS's spellings lands where the stored spec
has that setting. `replace` needs nothing: the change is the new spec."""

from __future__ import annotations

import copy
from typing import Any


def merged(current: Any, change: Any) -> Any:
    """Objects merged key by key, recursively; anything else in `change` (a list, a scalar,
    null) replaces what `current` has there. Neither argument is changed."""
    if not isinstance(current, dict) or not isinstance(change, dict):
        return copy.deepcopy(change)
    out = copy.deepcopy(current)
    for key, value in change.items():
        out[key] = merged(out[key], value) if key in out else copy.deepcopy(value)
    return out
