"""Storage credentials in specs: stored, used by workers, never echoed by the API."""

from __future__ import annotations

import copy
from typing import Any

from controlplane.services.spec import OBJECT_STORAGE_SCHEMES, REDACTED

SECRET_FIELDS = ("access_key_secret",)


def _stores(spec: Any):
    """Each object-storage block of a spec (storage[i].oss/obs/s3), as mutable dicts."""
    if not isinstance(spec, dict) or not isinstance(spec.get("storage"), list):
        return
    for entry in spec["storage"]:
        if isinstance(entry, dict):
            for scheme in OBJECT_STORAGE_SCHEMES:
                if isinstance(entry.get(scheme), dict):
                    yield entry[scheme]


def redact(spec: Any) -> Any:
    """A copy of the spec with every secret replaced by REDACTED."""
    out = copy.deepcopy(spec)
    for store in _stores(out):
        for name in SECRET_FIELDS:
            if store.get(name):
                store[name] = REDACTED
    return out


def keep_secrets(new: Any, old: Any) -> Any:
    """An update that sends back REDACTED keeps the stored secret of the same storage path,
    so a spec read from the API can be edited and PUT back as is."""
    stored = {store.get("path"): store for store in _stores(old)}
    out = copy.deepcopy(new)
    for store in _stores(out):
        for name in SECRET_FIELDS:
            if store.get(name) == REDACTED:
                store[name] = stored.get(store.get("path"), {}).get(name)
                if store[name] is None:
                    del store[name]
    return out
