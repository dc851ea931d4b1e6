"""What an instance needs before it can be created: staged models, model-store checks and
cards. Kept apart from the reconciler so its rules are readable (and testable) on their own."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from django.conf import settings

from contracts.hub_refs import is_hub_ref, parse_hub_ref
from contracts.object_store import ObjectSource, StagingError, source_from_env
from contracts.spec import ServiceSpec
from contracts.spec_facts import model_refs
from workers.models import hub
from workers.models.hub_cache import HUB_FOLDER
from workers.models.hub_pins import VersionPins
from workers.models.storage import stage
from workers.runtimes.base import InstanceError
from workers.runtimes.pulls import size_text

GPU_ENGINES = ("vllm", "bladellm", "tgi", "paddlenlp")


def object_sources(spec: ServiceSpec) -> list[ObjectSource]:
    """Every object-storage location the spec reads: storage entries and model URIs."""
    sources = []
    for entry in spec.storage:
        store = entry.oss or entry.obs or entry.s3
        if store is not None:
            sources.append(
                source_from_env(
                    store.path, store.endpoint, store.access_key_id, store.access_key_secret
                )
            )
    for _, ref in model_refs(spec):
        if "://" in ref and not is_hub_ref(ref):
            sources.append(source_from_env(ref))
    return sources


def hub_models(spec: ServiceSpec) -> list[str]:
    """The spec's models on a hub (hf://, modelscope://), each once, in model_refs' order."""
    return list(dict.fromkeys(ref for _, ref in model_refs(spec) if is_hub_ref(ref)))


def stage_models(
    spec: ServiceSpec, cache_root: Path, report: Callable[[str], None], pins: VersionPins
) -> dict[str, str]:
    """Stage every object-storage source and hub model; {uri: host directory}. Raises
    InstanceError for what the user must fix, HubUnreachable for what may pass."""
    staged: dict[str, str] = {}
    for source in object_sources(spec):
        if source.uri in staged:
            continue
        report(f"staging {source.uri}")
        try:
            path = stage(source, cache_root, progress=_throttled(source.uri, report))
        except StagingError as exc:
            raise InstanceError(str(exc)) from None
        staged[source.uri] = str(path)
    for ref in hub_models(spec):
        staged[ref] = str(stage_hub_model(ref, spec, pins, cache_root, report))
    return staged


def stage_hub_model(
    ref: str, spec: ServiceSpec, pins: VersionPins, cache_root: Path,
    report: Callable[[str], None] = lambda _: None,
) -> Path:  # fmt: skip
    """Stage hub model `ref` at the commit its version records (see hub_commit) into
    `cache_root/hub`; its folder. Raises InstanceError for what the user must fix (no such
    repository or revision, no access), HubUnreachable for what may pass (the hub down)."""
    parsed = parse_hub_ref(ref)
    token = spec.llm.hub_token if spec.llm else None
    commit = hub_commit(ref, spec, pins, report)
    report(f"staging {ref}")
    with _users_to_fix():
        folder, _ = hub.stage_hub(
            parsed, cache_root / HUB_FOLDER, token=token, endpoint=hub_endpoint(parsed.scheme),
            commit=commit, progress=_throttled(ref, report),
            requester=f"workspace-{pins.service.workspace_id}",
        )  # fmt: skip
    os.utime(folder)  # used now: the prune keeps a repository's most recently used commit
    return folder


def hub_commit(
    ref: str, spec: ServiceSpec, pins: VersionPins, report: Callable[[str], None] = lambda _: None
) -> str:
    """The commit hub model `ref` is served at: the one its version records, else the one its
    revision is at now, which is then recorded (unless another node was first). Raises
    InstanceError, HubUnreachable as stage_hub_model."""
    parsed = parse_hub_ref(ref)
    commit = parsed.revision if parsed.pinned else pins.recorded(ref)
    if commit is None:
        report(f"resolving {ref}")
        token = spec.llm.hub_token if spec.llm else None
        with _users_to_fix():
            commit = hub.resolve(parsed, token, hub_endpoint(parsed.scheme))
    return pins.record(ref, commit)


@contextlib.contextmanager
def _users_to_fix() -> Iterator[None]:
    """A hub's HubError as the InstanceError the user must act on; HubUnreachable as it is."""
    try:
        yield
    except hub.HubUnreachable:
        raise
    except hub.HubError as exc:
        raise InstanceError(str(exc)) from None


def hub_endpoint(scheme: str) -> str:
    return settings.WHARF_HF_ENDPOINT if scheme == "hf" else settings.WHARF_MODELSCOPE_ENDPOINT


def _throttled(uri: str, report: Callable[[str], None]) -> Callable[[int, int], None]:
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0 or done >= total:
            last[0] = now
            percent = 100 * done // total if total else 100
            report(f"staging {uri}: {size_text(done)} of {size_text(total)} ({percent}%)")

    return progress


def check_model_store(spec: ServiceSpec, model_store: Path) -> None:
    """Model-store names must exist on this node before an engine is started for them."""
    for _, ref in model_refs(spec):
        in_store = not ref.startswith("/") and "://" not in ref
        if in_store and not (model_store / ref).is_dir():
            raise InstanceError(f"model {ref!r} is not in this node's model store ({model_store})")


def model_config(spec: ServiceSpec, placement) -> dict | None:
    """The main model's config.json, where this node can read it (store or staged cache)."""
    ref = spec.llm.model if spec.llm else None
    if not ref or ref.startswith("/"):
        return None
    folder = Path(placement.staged[ref]) if "://" in ref else Path(placement.model_store) / ref
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
