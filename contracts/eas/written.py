"""A canonical spec as EAS writes it (`GET /api/v1/services/<name>?format=eas`): the places
EAS's own documents put each setting, for a file eascmd and EAS's console take back. Wharf's
own sections (`llm`, `health_check`, routing) stay as they are. Pure."""

from __future__ import annotations

import copy
from typing import Any

GRACE = "eas.termination_grace_period"  # flat inside metadata, as EAS's appendix writes it


def eas_form(spec: Any) -> Any:
    """`spec` (canonical, as stored) with `metadata.name`, `metadata.rolling_strategy` and
    `metadata["eas.termination_grace_period"]`; anything but an object as is."""
    if not isinstance(spec, dict):
        return spec
    out = copy.deepcopy(spec)
    metadata: dict = out["metadata"] if isinstance(out.get("metadata"), dict) else {}
    written: dict = {"name": out.pop("name")} if "name" in out else {}
    written.update(metadata)
    if "termination_grace_period" in written:
        written[GRACE] = written.pop("termination_grace_period")
    if "rolling_strategy" in out:
        written["rolling_strategy"] = out.pop("rolling_strategy")
    return {"metadata": written, **{k: v for k, v in out.items() if k != "metadata"}}
