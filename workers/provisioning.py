"""What an instance needs before it can be created: staged models, model-store checks and
cards. Kept apart from the reconciler so its rules are readable (and testable) on their own."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from contracts.spec import ServiceSpec
from contracts.spec_facts import model_refs
from workers.object_store import ObjectSource, StagingError, source_from_env
from workers.runtimes.base import InstanceError
from workers.storage import stage

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
        if "://" in ref:
            sources.append(source_from_env(ref))
    return sources


def stage_models(
    spec: ServiceSpec, cache_root: Path, report: Callable[[str], None]
) -> dict[str, str]:
    """Stage every object-storage source; {uri: host directory}. Raises InstanceError."""
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
    return staged


def _throttled(uri: str, report: Callable[[str], None]) -> Callable[[int, int], None]:
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0 or done >= total:
            last[0] = now
            percent = 100 * done // total if total else 100
            report(f"staging {uri}: {percent}% of {total / 1e9:.2f} GB")

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
