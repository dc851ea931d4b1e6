"""The storage folders a node makes for one instance before it starts, beside the cached
object-storage copies (workers.models.provisioning): git clones (workers.models.git_mounts), folders
copied out of images (workers.models.image_mounts) and writable object-storage copies
(workers.models.writable_storage). Each is named in Placement.staged by its entry
(contracts.spec_storage.node_folder), which the engine's plan bind-mounts. A dataset's volume
is the operator's to make: it is only checked for here."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import docker.errors

from contracts.spec import ServiceSpec
from contracts.spec_storage import Dataset, node_folder
from workers.models import git_mounts, image_mounts, writable_storage
from workers.runtimes import InstanceError, Runtime
from workers.runtimes.pulls import Report


def provide(
    spec: ServiceSpec, instance: str, runtime: Runtime, staged: dict[str, str], report: Report,
    cache_root: Path, writable_root: Path, platform_images: Collection[str] = (),
) -> dict[str, str]:  # fmt: skip
    """{node_folder name: host folder} for each git, image and writable entry of `spec`.
    Raises InstanceError for what the user must fix; anything else may pass (retried)."""
    made: dict[str, str] = {}
    for i, entry in enumerate(spec.storage):
        if entry.git is not None:
            report(f"cloning {entry.git.repo}")
            try:
                folder = git_mounts.clone(entry.git, cache_root)
            except git_mounts.GitMountError as exc:
                raise InstanceError(f"storage[{i}].git: {exc}") from None
            made[node_folder(i, "git")] = str(folder)
        elif entry.image is not None:
            client = getattr(runtime, "client", None)
            if client is None:
                raise InstanceError(f"storage[{i}].image needs the Docker runtime; this node "
                                    f"runs {runtime.name} instances")  # fmt: skip
            report(f"copying {entry.image.path} out of {entry.image.image}")
            tenant = entry.image.image not in platform_images
            folder = image_mounts.copy_out(client, entry.image, cache_root, spec.dockerAuth,
                                           report, tenant)  # fmt: skip
            made[node_folder(i, "image")] = str(folder)
        elif entry.dataset is not None:
            check_dataset(runtime, entry.dataset, f"storage[{i}].dataset")
        elif (store := entry.writable_store()) is not None:
            copy = writable_storage.prepare(writable_root, instance, i, Path(staged[store.path]))
            made[node_folder(i, "writable")] = str(copy)
    return made


def check_dataset(runtime: Runtime, dataset: Dataset, field: str) -> None:
    """InstanceError unless the node's Docker has the dataset's named volume: Docker would
    make an empty one, and the engine would take an empty folder for the dataset."""
    client = getattr(runtime, "client", None)
    if client is None:
        raise InstanceError(f"{field} needs the Docker runtime; this node runs {runtime.name} "
                            "instances")  # fmt: skip
    volume = dataset.volume()
    try:
        client.volumes.get(volume)
    except docker.errors.NotFound:
        raise InstanceError(
            f"{field}: dataset volume {volume!r} is not on this node; an operator makes and "
            f"fills it (docker volume create {volume}, then copies the dataset in)"
        ) from None
