"""EAS's spellings of one setting, made one: a service JSON as an EAS user writes it, in
Wharf's canonical form (contracts.spec), before the strict schema reads it. Pure.

EAS accepts the same setting in two or three places (its parser's alias lists, and what its
documents and published files use; ../shared/eas/PARAMETERS.md §0):
- `name` or `metadata.name`;
- dotted keys, flat inside `metadata` or at the top (`"rpc.keepalive": 3000`,
  `"eas.termination_grace_period": 30`), or nested (`"rpc": {"keepalive": 3000}`);
- aliases: `metadata.autoscaler` for `autoscaler` (`metadata.cronscaler` likewise),
  `metadata.rolling_strategy` (EAS's place) for `rolling_strategy`, `credential.docker_auth`,
  `credential.token` and
  `credential.generate_token` for `dockerAuth`, `token` and `generate_token`,
  `runtime.termination_grace_period` and `eas.termination_grace_period` for Wharf's
  `metadata.termination_grace_period`, `rpc.*` beside `metadata.rpc.*`,
  `metadata.max_queue_size` for `metadata.rpc.max_queue_size`, `metadata.worker_threads` and
  `metadata.workers` for `metadata.rpc.worker_threads`, a top-level `resource`;
- the scaling sections' other shapes (contracts.eas.scaling_forms).

One setting given twice with different values is an error naming both places; given twice
alike, it is taken once. A key that is no spelling of anything is left where it is, for the
strict schema to refuse by name.
"""

from __future__ import annotations

import copy
from typing import Any

from contracts.eas.scaling_forms import scaling_forms
from contracts.spec import SpecError

Path = tuple[str, ...]

# (an alias, the canonical place), as paths of keys from the top of the document. Dotted keys
# are split first, so `"rpc.keepalive"` inside metadata is metadata.rpc.keepalive here.
ALIASES: tuple[tuple[Path, Path], ...] = (
    (("metadata", "name"), ("name",)),
    (("metadata", "autoscaler"), ("autoscaler",)),
    (("metadata", "cronscaler"), ("cronscaler",)),
    (("metadata", "rolling_strategy"), ("rolling_strategy",)),
    (("credential", "docker_auth"), ("dockerAuth",)),
    (("credential", "token"), ("token",)),
    (("credential", "generate_token"), ("generate_token",)),
    (("runtime", "termination_grace_period"), ("metadata", "termination_grace_period")),
    (("metadata", "eas", "termination_grace_period"), ("metadata", "termination_grace_period")),
    (("eas", "termination_grace_period"), ("metadata", "termination_grace_period")),
    (("rpc",), ("metadata", "rpc")),
    (("metadata", "max_queue_size"), ("metadata", "rpc", "max_queue_size")),
    (("metadata", "rate_limit"), ("metadata", "rpc", "rate_limit")),
    (("metadata", "keepalive"), ("metadata", "rpc", "keepalive")),
    (("metadata", "worker_threads"), ("metadata", "rpc", "worker_threads")),
    (("metadata", "workers"), ("metadata", "rpc", "worker_threads")),
    (("resource",), ("metadata", "resource")),
    (("scheduling",), ("metadata", "scheduling")),
    (("networking", "enable_grpc"), ("metadata", "enable_grpc")),
    (("metadata", "traffic_state"), ("networking", "traffic_state")),
    (("runtime", "enable_crash_block"), ("metadata", "enable_crash_block")),
    (("metadata", "enable_sigterm"), ("metadata", "rpc", "enable_sigterm")),
)
# Where dotted keys are split: EAS writes them at the top and inside metadata.
DOTTED_IN: tuple[Path, ...] = ((), ("metadata",))


def where(path: Path) -> str:
    return ".".join(path)


def canonical(data: Any) -> Any:
    """`data` with every EAS spelling made Wharf's; a copy (the caller's is left as sent).
    Anything but an object is returned as is, for the schema to refuse."""
    if not isinstance(data, dict):
        return data
    found = copy.deepcopy(data)
    errors: dict[str, list[str]] = {}
    for parent in DOTTED_IN:
        node = _get(found, parent)
        if isinstance(node, dict):
            _split_dotted(node, parent, errors)
    for alias, target in ALIASES:
        _move(found, alias, target, errors)
    scaling_forms(found, errors)
    for parent in ((), ("credential",), ("runtime",), ("eas",), ("metadata", "eas"),
                   ("networking",)):  # fmt: skip
        node = _get(found, parent)
        if parent and isinstance(node, dict) and not node:  # emptied by the moves above
            _pop(found, parent)
    if errors:
        raise SpecError(errors)
    return found


def _split_dotted(node: dict, parent: Path, errors: dict[str, list[str]]) -> None:
    """`{"rpc.keepalive": 1}` in `node` as `{"rpc": {"keepalive": 1}}`, merged with what is
    there; a clash is an error naming both."""
    for key in [k for k in node if isinstance(k, str) and "." in k]:
        value = node.pop(key)
        parts = tuple(key.split("."))
        if not all(parts):
            node[key] = value  # not a path: left for the schema to name
            continue
        _put(node, parts, value, parent + parts, f"{where(parent + (key,))!s}", errors)


def _move(data: dict, alias: Path, target: Path, errors: dict[str, list[str]]) -> None:
    parent = _get(data, alias[:-1])
    if not isinstance(parent, dict) or alias[-1] not in parent:
        return
    value = parent.pop(alias[-1])
    _put(data, target, value, target, where(alias), errors)


def _put(
    root: dict, path: Path, value: Any, named: Path, given_as: str, errors: dict[str, list[str]]
) -> None:
    """Set `path` of `root` to `value`, merging objects; `named` is the path an error names,
    `given_as` how the value was spelled."""
    node, above = root, len(named) - len(path)  # `named`'s keys above `root`
    for i, key in enumerate(path[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            errors.setdefault(where(named[: above + i + 1]), []).append(
                f"given both as a value and, as {given_as}, as an object"
            )
            return
        node = child
    key = path[-1]
    if key not in node:
        node[key] = value
    elif isinstance(node[key], dict) and isinstance(value, dict):
        for inner, item in value.items():
            _put(node[key], (inner,), item, named + (inner,), f"{given_as}.{inner}", errors)
    elif node[key] != value:
        errors.setdefault(where(named), []).append(
            f"given twice with different values (also as {given_as}); give it once"
        )


def _get(data: dict, path: Path) -> Any:
    node: Any = data
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _pop(data: dict, path: Path) -> None:
    parent = _get(data, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1], None)
