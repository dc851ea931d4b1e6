"""The node's side of reading a service's tokenizer (contracts.node_tokenizer): this node's
worker finds the folder on this host that an instance placed here reads its model from, and
answers with the tokenizer files in it. Nothing is staged or downloaded for it.

The folder, by where the model comes from:
- a model-store name: WHARF_MODEL_DIR/<name> (the runtime's model store);
- an object-storage URI: the staged copy the instance reads (its recorded paths), else the
  newest copy on this node;
- a hub reference: the staged commit the instance reads, else the one its version records;
- an absolute path: as a local process, that path on this node; in a container, the staged
  object-storage copy that the storage entry mounted there provides (an NFS or memory mount
  is not on this host's disk: no tokenizer from it).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections

from contracts.engines.plan import Placement
from contracts.hub_refs import is_hub_ref, parse_hub_ref
from contracts.node_tokenizer import (
    REPLY_TTL,
    REQUESTS,
    TokenizerFilesError,
    answer,
    read_tokenizer,
)
from contracts.object_store import ObjectSource, StagingError, source_from_env
from contracts.spec import STORAGE_SOURCES, ServiceSpec, StorageEntry
from controlplane.services.models import Instance
from workers.locks import client
from workers.models import storage
from workers.models.hub_cache import HUB_FOLDER
from workers.models.hub_pins import VersionPins
from workers.nodes.node_logs import NodeRequestServer, reply

log = logging.getLogger(__name__)


def _staged_object(source: ObjectSource, paths: Iterable[str], cache_root: Path) -> Path:
    """The copy of `source` the instance reads (one of its paths), else the node's newest."""
    try:
        key = storage.cache_key(source)
    except StagingError as exc:
        raise TokenizerFilesError(str(exc)) from None
    for path in map(Path, paths):
        if path.name == key or path.name.startswith(f"{key}@"):
            return path
    newest = storage.newest_copy(cache_root, key)
    if newest is None:
        raise TokenizerFilesError("it is not staged on this node")
    return newest


def _staged_hub(ref: str, paths: Iterable[str], cache_root: Path, pins: VersionPins) -> Path:
    """The commit of hub model `ref` the instance reads, else the one its version records."""
    parsed = parse_hub_ref(ref)
    repo = cache_root / HUB_FOLDER / parsed.scheme / parsed.repo
    for path in map(Path, paths):
        if path.parent == repo:
            return path
    commit = parsed.revision if parsed.pinned else pins.recorded(ref)
    if commit is None or not (repo / commit).is_dir():
        raise TokenizerFilesError("it is not staged on this node")
    return repo / commit


def _mount_of(spec: ServiceSpec, path: str) -> tuple[StorageEntry, str] | None:
    """The storage entry mounted where `path` lies (the deepest), and the rest of the path."""
    found = None
    for entry in spec.storage:
        mount = entry.mount_path.rstrip("/")
        if (path == mount or path.startswith(mount + "/")) and (
            found is None or len(mount) > len(found[0].mount_path.rstrip("/"))
        ):
            found = (entry, path[len(mount) :].strip("/"))
    return found


def _mounted(spec: ServiceSpec, ref: str, paths: Iterable[str], cache_root: Path) -> Path:
    """The host folder behind container path `ref`: a staged object-storage mount's."""
    found = _mount_of(spec, ref)
    if found is None:
        raise TokenizerFilesError("no storage entry of the spec mounts it")
    entry, rest = found
    store = entry.object_store()
    if store is None:
        kind = next(kind for kind in STORAGE_SOURCES if getattr(entry, kind))
        where = "read for tokenizers" if kind in ("git", "image") else "on this node's disk"
        raise TokenizerFilesError(f"its {kind} mount is not {where}")
    source = source_from_env(store.path, store.endpoint, store.access_key_id,
                             store.access_key_secret)  # fmt: skip
    return _staged_object(source, paths, cache_root) / rest


def model_folder(
    ref: str, spec: ServiceSpec, paths: Iterable[str], placement: Placement, pins: VersionPins
) -> tuple[Path, Path]:
    """(the folder on this host where the engine reads model `ref`, the folder every file
    read must stay inside). TokenizerFilesError when there is none."""
    cache_root = Path(settings.WHARF_CACHE_DIR)
    if ref.startswith("/"):
        if not placement.in_container:  # a local process reads the node's own path
            return Path(ref), Path(ref)
        folder = _mounted(spec, ref, paths, cache_root)
        return folder, folder
    if is_hub_ref(ref):
        folder = _staged_hub(ref, paths, cache_root, pins)
        return folder, folder
    if "://" in ref:
        folder = _staged_object(source_from_env(ref), paths, cache_root)
        return folder, folder
    store = Path(placement.model_store)
    return store / ref, store


def tokenizer_of(node: str, runtime, instance: str) -> str:
    """The answer for `instance` (placed on this node): its model's tokenizer files, or why
    there are none."""
    row = Instance.objects.select_related("service").filter(name=instance, node=node).first()
    spec = row.placed_spec() if row is not None else None
    if row is None or spec is None:
        return answer(error=f"instance {instance} is not on node {node}")
    if spec.llm is None or not spec.llm.model:
        return answer(error=f"service {row.service.name} names no model (llm.model)")
    ref = spec.llm.model
    observed = [i for i in runtime.list(service=row.service.name) if i.name == instance]
    if not observed:
        return answer(error=f"instance {instance} has not started on node {node}")
    pins = VersionPins(row.service, row.spec_hash)
    try:
        folder, root = model_folder(ref, spec, observed[0].paths or (), runtime.placement(), pins)
        return answer(files=read_tokenizer(folder, root))
    except TokenizerFilesError as exc:
        return answer(error=f"{ref} on node {node}: {exc}")


def serve_one(node: str, runtime, wait: float = 1.0) -> bool:
    """Answer one request if one comes within `wait` seconds; True if one was answered."""
    redis = client()
    item = redis.blpop([REQUESTS.format(node=node)], timeout=wait)
    if item is None:
        return False
    try:
        request = json.loads(item[1])
        instance, key = str(request["instance"]), str(request["reply"])
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("node %s: unreadable tokenizer request: %s", node, exc)
        return False
    close_old_connections()  # the database may have closed an idle one
    reply(redis, key, tokenizer_of(node, runtime, instance), REPLY_TTL)
    return True


class TokenizerServer(NodeRequestServer):
    """Answers this node's tokenizer requests (`wharf bench` asks through the API)."""

    what = "tokenizer"

    def serve_one(self) -> bool:
        return serve_one(self.node, self.runtime)
