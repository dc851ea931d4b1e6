"""Where an engine finds a model, and the mount that puts it there."""

from __future__ import annotations

import hashlib

from contracts.engines.plan import Mount, Placement


def staged_target(uri: str) -> str:
    """Where a staged object-storage model appears in a container: oss://b/p/ -> /models/oss/b/p."""
    scheme, _, rest = uri.partition("://")
    return f"/models/{scheme}/{rest.strip('/')}"


def locate_model(ref: str, placement: Placement) -> tuple[str, list[Mount]]:
    """The path the engine reads for `ref`, and the read-only mounts that provide it.

    `ref` is a model-store name, an absolute path inside the container (a storage mount
    provides it), or an object-storage URI the worker has staged (placement.staged).
    """
    if ref.startswith("/"):
        return ref, []
    if "://" in ref:
        host_dir = placement.staged.get(ref, f"<staged {ref}>")  # preview: not staged yet
        if not placement.in_container:
            return host_dir, []
        target = staged_target(ref)
        return target, [Mount(kind="bind", source=host_dir, target=target)]
    host_dir = f"{placement.model_store.rstrip('/')}/{ref}"
    if not placement.in_container:
        return host_dir, []
    target = f"/models/{ref}"
    return target, [Mount(kind="bind", source=host_dir, target=target)]


ADAPTERS_ROOT = "/adapters"  # where a container sees its node's adapters folder for the service


def adapter_folder(name: str, ref: str) -> str:
    """An adapter's folder in the node's adapters folder: its name and a digest of where it
    comes from, so that an adapter given a new model gets a new folder."""
    return f"{name}-{hashlib.sha256(ref.encode()).hexdigest()[:12]}"


def locate_adapter(name: str, ref: str, placement: Placement) -> tuple[str, list[Mount]]:
    """The path the engine reads adapter `name` (model `ref`) at, and its mounts. Where the
    node keeps the service's adapters in one folder (placement.adapters_dir), they are there:
    the folder is mounted whole, so adapters the node adds later are seen by running engines.
    An absolute path is read where it is (a storage mount provides it); without the folder
    (the preview, a pod) an adapter is found like a model."""
    if ref.startswith("/") or not placement.adapters_dir:
        return locate_model(ref, placement)
    if not placement.in_container:
        return f"{placement.adapters_dir}/{adapter_folder(name, ref)}", []
    folder = Mount(kind="bind", source=placement.adapters_dir, target=ADAPTERS_ROOT)
    return f"{ADAPTERS_ROOT}/{adapter_folder(name, ref)}", [folder]
