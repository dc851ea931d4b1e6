"""Credentials in specs (object storage's, the image registry's `dockerAuth`, the hubs'
`llm.hub_token`): stored, used by workers, never echoed by the API."""

from __future__ import annotations

import copy
from typing import Any

from contracts.spec import OBJECT_STORAGE_SCHEMES, REDACTED

SECRET_FIELDS = ("access_key_secret",)  # of each object-storage block
TOP_SECRETS = ("dockerAuth",)  # of the spec itself
LLM_SECRETS = ("hub_token",)  # of its llm section


def object_stores(spec: Any):
    """Each object-storage block of a spec (storage[i].oss/obs/s3), as mutable dicts."""
    if not isinstance(spec, dict) or not isinstance(spec.get("storage"), list):
        return
    for entry in spec["storage"]:
        if isinstance(entry, dict):
            for scheme in OBJECT_STORAGE_SCHEMES:
                if isinstance(entry.get(scheme), dict):
                    yield entry[scheme]


def secret_places(spec: Any) -> list[tuple[dict, tuple[str, ...]]]:
    """(block, the names of its secrets) for each block of a spec that may hold secrets: the
    spec itself, its llm section, each object-storage block."""
    places = [(spec, TOP_SECRETS)] if isinstance(spec, dict) else []
    if isinstance(spec, dict) and isinstance(spec.get("llm"), dict):
        places.append((spec["llm"], LLM_SECRETS))
    return places + [(store, SECRET_FIELDS) for store in object_stores(spec)]


def redact(spec: Any) -> Any:
    """A copy of the spec with every secret replaced by REDACTED."""
    out = copy.deepcopy(spec)
    for block, names in secret_places(out):
        for name in names:
            if block.get(name):
                block[name] = REDACTED
    return out


def keep_secrets(new: Any, old: Any) -> Any:
    """An update that sends back REDACTED keeps the stored secret of the same storage path,
    so a spec read from the API can be edited and PUT back as is; dockerAuth and the hub
    token are the spec's."""
    stored = {store.get("path"): store for store in object_stores(old)}
    out = copy.deepcopy(new)
    old = old if isinstance(old, dict) else {}
    if isinstance(out, dict):
        _keep(out, old, TOP_SECRETS)
        if isinstance(out.get("llm"), dict):
            old_llm = old.get("llm")
            _keep(out["llm"], old_llm if isinstance(old_llm, dict) else {}, LLM_SECRETS)
    for store in object_stores(out):
        for name in SECRET_FIELDS:
            if store.get(name) == REDACTED:
                store[name] = stored.get(store.get("path"), {}).get(name)
                if store[name] is None:
                    del store[name]
    return out


def _keep(block: dict, old: dict, names: tuple[str, ...]) -> None:
    """In `block`, each of `names` sent back as REDACTED takes its value from `old` (or goes)."""
    for name in names:
        if block.get(name) == REDACTED:
            if old.get(name) is None:
                del block[name]
            else:
                block[name] = old[name]
