"""What `eascmd modify` does to a spec, pure: `-Dkey=value` settings and EAS's merge update.

Both work on the spec as EAS writes it (`GET /api/v1/services/<name>?format=eas`), so a file or
a `-D` path in EAS's spelling lands where the stored spec has that setting.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from wharfcli.client import USAGE, CliError


def parse_setting(text: str) -> tuple[list[str], Any]:
    """`metadata.instance=2` → (["metadata", "instance"], 2). The value is JSON where it parses
    as JSON (numbers, booleans, null, lists, objects, quoted strings), else the text itself."""
    key, sep, raw = text.partition("=")
    parts = key.split(".")
    if not sep or not key or any(not part for part in parts):
        raise CliError(f"-D{text}: expected -Dkey.path=value, e.g. -Dmetadata.instance=2", USAGE)
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return parts, value


def set_path(spec: dict[str, Any], parts: list[str], value: Any) -> None:
    """Sets `value` at the dotted path in place. A flat dotted key the spec already has (EAS's
    `"eas.termination_grace_period"` inside metadata) is set where it is, not nested beside
    it; a number indexes a list the spec has there."""
    node: Any = spec
    for i, part in enumerate(parts):
        rest = ".".join(parts[i:])
        if isinstance(node, dict) and len(parts) - i > 1 and rest in node:
            node[rest] = value
            return
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                where = ".".join(parts[:i])
                raise CliError(f"{where} has {len(node)} entries; {part!r} is not one", USAGE)
            index = int(part)
            if last:
                node[index] = value
                return
            node = node[index]
            continue
        if not isinstance(node, dict):
            where = ".".join(parts[:i])
            raise CliError(f"{where} is not an object; cannot set {'.'.join(parts)}", USAGE)
        if last:
            node[part] = value
            return
        if node.get(part) is None:
            node[part] = {}
        node = node[part]


def apply_settings(spec: dict[str, Any], settings: list[str]) -> dict[str, Any]:
    """A copy of `spec` with every `-D` setting applied, in order."""
    out = copy.deepcopy(spec)
    for text in settings:
        set_path(out, *parse_setting(text))
    return out


def merge(current: Any, change: Any) -> Any:
    """EAS's UpdateService `merge`: objects merged key by key, recursively; anything else (a
    list, a scalar, null) in `change` replaces what `current` has."""
    if not isinstance(current, dict) or not isinstance(change, dict):
        return copy.deepcopy(change)
    out = copy.deepcopy(current)
    for key, value in change.items():
        out[key] = merge(out[key], value) if key in out else copy.deepcopy(value)
    return out
