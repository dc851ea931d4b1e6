"""Engine adapters: pure functions from a service spec to a container plan.

Each engine has a module here with `render(spec, placement) -> ContainerPlan` and
`validate(spec) -> {field: [errors]}` (rules only that engine knows, e.g. its quantization
choices). `render` below adds what every engine shares: storage, shared memory and the limits
every instance runs under (contracts.limits).
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from types import ModuleType

from contracts.engines.gang import member_placements
from contracts.engines.plan import ContainerPlan, Mount, Placement
from contracts.engines.prepare import with_prepare
from contracts.engines.sidecars import sidecar_errors, with_sidecars
from contracts.limits import bounded
from contracts.spec import ServiceSpec
from contracts.spec_facts import card_need
from contracts.spec_storage import DATASET_MOUNT, StorageEntry, node_folder

__all__ = [
    "ContainerPlan", "Mount", "Placement", "engine_name", "instance_preview", "render",
    "render_members", "validate",
]  # fmt: skip

GB = 1024**3
MODULES = {
    "vllm": "vllm",
    "vllm-cpu": "vllm",
    "vllm-ascend": "vllm_ascend",
    "sglang": "sglang",
    "bladellm": "bladellm",
    "tgi": "tgi",
    "paddlenlp": "paddlenlp",
    "custom": "custom",
}


def default_images() -> dict[str, str]:
    """Each engine's own image, as its adapter names it (the platform's, not a tenant's)."""
    found = {}
    for engine, name in MODULES.items():
        module = importlib.import_module(f"contracts.engines.{name}")
        image = getattr(module, "IMAGES", {}).get(engine) or getattr(module, "IMAGE", None)
        if image:
            found[engine] = image
    return found


def engine_name(spec: ServiceSpec) -> str:
    """The engine whose API `spec`'s instances serve (a key of MODULES): a given command is
    always run verbatim, so whatever it starts is a custom engine to Wharf."""
    container = spec.containers[0] if spec.containers else None
    if spec.llm is None or (container and (container.command or container.script)):
        return "custom"
    return spec.llm.engine


def adapter(spec: ServiceSpec) -> ModuleType:
    """The engine that renders `spec`."""
    return importlib.import_module(f"contracts.engines.{MODULES[engine_name(spec)]}")


def validate(spec: ServiceSpec) -> dict[str, list[str]]:
    """The engine's own rules, and the ports of the instance's other containers beside it."""
    engine = adapter(spec)
    check = getattr(engine, "validate", None)
    main = spec.containers[0].port if spec.containers else None
    return {**(check(spec) if check else {}),
            **sidecar_errors(spec, main or engine.DEFAULT_PORT)}  # fmt: skip


def render(spec: ServiceSpec, placement: Placement | None = None) -> ContainerPlan:
    """The container of one instance of `spec`."""
    placement = placement or Placement()
    plan = _with_resources(spec, adapter(spec).render(spec, placement), placement)
    plan = with_prepare(spec, plan)  # pip installs the container's requirements first
    return with_sidecars(spec, plan, storage_mounts(spec, placement), placement.limits)


def render_members(spec: ServiceSpec, placement: Placement | None = None) -> list[ContainerPlan]:
    """The container of each member of one instance of `spec`, leader first: one for an
    instance on one host, unit.size for one across hosts (with the preview's placeholder
    addresses unless `placement` names its member)."""
    placement = placement or Placement()
    if placement.gang is not None:
        return [render(spec, placement)]
    return [render(spec, member) for member in member_placements(spec, placement)]


def instance_preview(spec: ServiceSpec, placement: Placement) -> dict:
    """One instance as the preview shows it: its container (an instance across hosts: its
    leader's) and `members`, each member's rank, command, environment ([] for an instance
    on one host), and the files each reads (its rank tables, where the spec has them)."""
    plans = render_members(spec, placement)
    members = []
    for rank, plan in enumerate(plans if len(plans) > 1 else []):
        shown = plan.preview()
        members.append(
            {"rank": rank, "command": shown["command"], "env": shown["env"], "files": plan.files}
        )
    return {**plans[0].preview(), "members": members}


def _node_folder(index: int, entry: StorageEntry) -> str | None:
    """Placement.staged's name for the entry's folder when the node makes it for this
    instance alone: a git clone, an image's folder, a writable object-storage copy."""
    if entry.git is not None:
        return node_folder(index, "git")
    if entry.image is not None:
        return node_folder(index, "image")
    if entry.writable_store() is not None:
        return node_folder(index, "writable")
    return None


def _with_resources(spec: ServiceSpec, plan: ContainerPlan, placement: Placement) -> ContainerPlan:
    meta = spec.metadata
    shm = meta.shm_size * GB if meta.shm_size else plan.shm_size_bytes
    for entry in spec.storage:
        if entry.empty_dir is not None and entry.mount_path.rstrip("/") == "/dev/shm":
            size = entry.empty_dir.size_limit * GB if entry.empty_dir.size_limit else None
            shm = size or shm
    mounts = [*plan.mounts, *storage_mounts(spec, placement)]
    _, cards = card_need(spec, placement.role)
    return bounded(replace(plan, mounts=mounts, shm_size_bytes=shm), spec, cards, placement.limits)


def storage_mounts(spec: ServiceSpec, placement: Placement) -> list[Mount]:
    """The mounts of the spec's storage[] (but /dev/shm, the container's shared memory, and a
    disk empty_dir, its writable layer), as every container of an instance sees them."""
    mounts = []
    for i, entry in enumerate(spec.storage):
        if entry.empty_dir is not None:
            size = entry.empty_dir.size_limit * GB if entry.empty_dir.size_limit else None
            if entry.empty_dir.medium == "memory" and entry.mount_path.rstrip("/") != "/dev/shm":
                mounts.append(Mount("tmpfs", entry.mount_path, size_bytes=size, read_only=False))
        elif entry.nfs is not None:
            source = f"{entry.nfs.server}:{entry.nfs.path}"
            mounts.append(Mount("nfs", entry.mount_path, source, read_only=entry.nfs.readOnly))
        elif entry.pvc is not None:  # Kubernetes only (contracts.spec_rules.runtime_checks)
            claim = entry.pvc.claim_name
            mounts.append(Mount("pvc", entry.mount_path, claim, read_only=entry.pvc.read_only))
        elif entry.dataset is not None:  # a volume the operator filled: Docker's or a claim
            volume, read_only = entry.dataset.volume(), entry.dataset.read_only
            mounts.append(Mount(DATASET_MOUNT, entry.mount_path, volume, read_only=read_only))
        elif (folder := _node_folder(i, entry)) is not None:  # made by the node, its own
            host_dir = placement.staged.get(folder, f"<{folder} on the node>")
            read_only = entry.writable_store() is None
            mounts.append(Mount("bind", entry.mount_path, host_dir, read_only=read_only))
        else:
            store = entry.object_store()
            assert store is not None
            host_dir = placement.staged.get(store.path, f"<staged {store.path}>")
            mounts.append(Mount("bind", entry.mount_path, host_dir))
    return mounts
