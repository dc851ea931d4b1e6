"""Credentials in specs (object storage's, the image registry's `dockerAuth`): stored, used
by workers, never echoed by the API."""

from __future__ import annotations

import copy
from typing import Any

from contracts.spec import OBJECT_STORAGE_SCHEMES, REDACTED

SECRET_FIELDS = ("access_key_secret",)  # of each object-storage block
TOP_SECRETS = ("dockerAuth",)  # of the spec itself


def object_stores(spec: Any):
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
    if isinstance(out, dict):
        for name in TOP_SECRETS:
            if out.get(name):
                out[name] = REDACTED
    for store in object_stores(out):
        for name in SECRET_FIELDS:
            if store.get(name):
                store[name] = REDACTED
    return out


def keep_secrets(new: Any, old: Any) -> Any:
    """An update that sends back REDACTED keeps the stored secret of the same storage path,
    so a spec read from the API can be edited and PUT back as is; dockerAuth is the spec's."""
    stored = {store.get("path"): store for store in object_stores(old)}
    out = copy.deepcopy(new)
    if isinstance(out, dict):
        for name in TOP_SECRETS:
            if out.get(name) == REDACTED:
                kept = old.get(name) if isinstance(old, dict) else None
                if kept is None:
                    del out[name]
                else:
                    out[name] = kept
    for store in object_stores(out):
        for name in SECRET_FIELDS:
            if store.get(name) == REDACTED:
                store[name] = stored.get(store.get("path"), {}).get(name)
                if store[name] is None:
                    del store[name]
    return out
