"""Credentials in specs (object storage's, git repositories' `password`, the image
registry's `dockerAuth`, the hubs' `llm.hub_token`, the service's fixed `token`): stored
sealed, used by workers (the token by the API, which keeps its digest for the gateways),
never echoed by the API."""

from __future__ import annotations

import copy
from typing import Any

from contracts.hub_refs import is_hub_ref
from contracts.kube.manifests import registry
from contracts.spec import OBJECT_STORAGE_SCHEMES, REDACTED

SECRET_FIELDS = ("access_key_secret",)  # of each object-storage block
GIT_SECRETS = ("password",)  # of each git block (a password or an access token)
TOP_SECRETS = ("dockerAuth", "token")  # of the spec itself
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


def git_blocks(spec: Any) -> list[dict | None]:
    """Each storage entry's git block (storage[i].git) by the entry's index; None for others."""
    if not isinstance(spec, dict) or not isinstance(spec.get("storage"), list):
        return []
    return [entry["git"] if isinstance(entry, dict) and isinstance(entry.get("git"), dict)
            else None for entry in spec["storage"]]  # fmt: skip


def secret_places(spec: Any) -> list[tuple[dict, tuple[str, ...]]]:
    """(block, the names of its secrets) for each block of a spec that may hold secrets: the
    spec itself, its llm section, each object-storage block, each git block."""
    places = [(spec, TOP_SECRETS)] if isinstance(spec, dict) else []
    if isinstance(spec, dict) and isinstance(spec.get("llm"), dict):
        places.append((spec["llm"], LLM_SECRETS))
    places += [(block, GIT_SECRETS) for block in git_blocks(spec) if block is not None]
    return places + [(store, SECRET_FIELDS) for store in object_stores(spec)]


def redact(spec: Any) -> Any:
    """A copy of the spec with every secret replaced by REDACTED."""
    out = copy.deepcopy(spec)
    for block, names in secret_places(out):
        for name in names:
            if block.get(name):
                block[name] = REDACTED
    return out


class SecretsLostError(ValueError):
    """Secrets sent back masked whose target changed: {field: [what to do]}."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(errors))
        self.errors = errors


def keep_secrets(new: Any, old: Any) -> Any:
    """An update that sends back REDACTED keeps the stored secret while its target is the
    same, so a spec read from the API can be edited and PUT back as is. A secret follows its
    target: dockerAuth its images' registries, storage keys their endpoint and bucket, the
    hub token the hub repositories, a git password its repository. Sent back masked for a
    changed target (or with none stored), it is SecretsLostError, asking for the secret
    again: the stored one must never reach a registry, bucket or repository the user may
    have pointed elsewhere."""
    old = old if isinstance(old, dict) else {}
    out = copy.deepcopy(new)
    lost: dict[str, list[str]] = {}
    if not isinstance(out, dict):
        return out
    if _keep(out, old, "dockerAuth", _registries(out) == _registries(old)):
        lost["dockerAuth"] = ["the image's registry changed (or none was stored): give the "
                              "registry's credentials again"]  # fmt: skip
    if _keep(out, old, "token", True):  # the service's own: its target never changes
        lost["token"] = ["no token was stored: give the token, or leave token out"]
    llm, old_llm = out.get("llm"), old.get("llm")
    if isinstance(llm, dict):
        old_llm = old_llm if isinstance(old_llm, dict) else {}
        if _keep(llm, old_llm, "hub_token", _repositories(llm) == _repositories(old_llm)):
            lost["llm.hub_token"] = ["the hub models changed (or none was stored): give the "
                                     "token again"]  # fmt: skip
    stored = {_bucket(store): store for store in object_stores(old)}
    for i, (scheme, store) in enumerate(_indexed_stores(out)):
        for name in SECRET_FIELDS:
            if store.get(name) != REDACTED:
                continue
            kept = stored.get(_bucket(store), {}).get(name)
            if kept is None:
                lost[f"storage[{i}].{scheme}.{name}"] = [
                    "the endpoint or bucket changed (or none was stored): give the secret again"
                ]
            else:
                store[name] = kept
    lost.update(_keep_git_passwords(out, old))
    if lost:
        raise SecretsLostError(lost)
    return out


def _keep_git_passwords(new: dict, old: dict) -> dict[str, list[str]]:
    """Git passwords sent back masked take the stored one of the same repository (its URL),
    in `new` itself; {field: [what to do]} for those that cannot."""
    stored = {block.get("repo"): block for block in git_blocks(old) if block is not None}
    lost = {}
    for i, block in enumerate(git_blocks(new)):
        if block is None or block.get("password") != REDACTED:
            continue
        kept = stored.get(block.get("repo"), {}).get("password")
        if kept is None:
            lost[f"storage[{i}].git.password"] = [
                "the repository changed (or none was stored): give the password again"
            ]
        else:
            block["password"] = kept
    return lost


def _keep(block: dict, old: dict, name: str, same_target: bool) -> bool:
    """In `block`, `name` sent back as REDACTED takes the stored value when its target is the
    same; True when it cannot (the caller says why)."""
    if block.get(name) != REDACTED:
        return False
    if old.get(name) is None or not same_target:
        return True
    block[name] = old[name]
    return False


def _indexed_stores(spec: dict):
    """(scheme, block) of each storage entry by its index, (None, {}) for other entries."""
    entries = spec.get("storage") if isinstance(spec.get("storage"), list) else []
    for entry in entries:
        found = [(scheme, entry[scheme]) for scheme in OBJECT_STORAGE_SCHEMES
                 if isinstance(entry, dict) and isinstance(entry.get(scheme), dict)]  # fmt: skip
        yield found[0] if found else (None, {})


def _bucket(store: dict) -> tuple:
    """What a storage secret opens: the endpoint and the bucket (not the prefix in it)."""
    path = store.get("path")
    bucket = path.split("://", 1)[-1].split("/", 1)[0] if isinstance(path, str) else None
    scheme = path.split("://", 1)[0] if isinstance(path, str) else None
    return scheme, str(store.get("endpoint") or "").strip().rstrip("/").lower(), bucket


def _registries(spec: dict) -> list:
    """Where dockerAuth is sent: each container image's registry (the engine's own image
    when none is given)."""
    containers = spec.get("containers") if isinstance(spec.get("containers"), list) else []
    images = [c.get("image") for c in containers if isinstance(c, dict)]
    llm = spec.get("llm") if isinstance(spec.get("llm"), dict) else {}
    return sorted(registry(i) if isinstance(i, str) else f"engine {llm.get('engine')}"
                  for i in images or [None])  # fmt: skip


def _repositories(llm: dict) -> set[str]:
    """The hub repositories (hub and name, not the revision) an llm section names."""
    refs = [llm.get("model")]
    if isinstance(llm.get("speculative"), dict):
        refs.append(llm["speculative"].get("model"))
    lora = llm.get("lora") if isinstance(llm.get("lora"), dict) else {}
    adapters = lora.get("adapters") if isinstance(lora.get("adapters"), list) else []
    refs += [a.get("model") for a in adapters if isinstance(a, dict)]
    return {ref.split("@", 1)[0] for ref in refs if isinstance(ref, str) and is_hub_ref(ref)}
