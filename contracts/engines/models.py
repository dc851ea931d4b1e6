"""Where an engine finds a model, and the mount that puts it there."""

from __future__ import annotations

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
