"""`storage[].image`: a folder copied out of an image onto the node, for a read-only bind
mount (EAS: "copies a directory from an image into a local shared volume").

The image is pulled as the engine's own image is (workers.runtimes.pulls): a workspace's
image from a registry is pulled again on every start with the spec's `dockerAuth` alone, so
the registry decides whether this workspace may have it, not the node's store. The folder is
read through a created, never started container (`docker create` + the archive API), and
lands in the node cache as `<cache_key>@<image id>` (workers.models.storage's naming, so the hourly
prune removes copies no instance mounts); a copy of that image id already there is reused.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path

from docker.errors import APIError, ImageNotFound, NotFound

from contracts.spec_storage import ImageFolder
from workers.models.storage import locked
from workers.runtimes.base import InstanceError
from workers.runtimes.pulls import Report, pull

# Never run: docker create needs a command for images that name none.
NO_COMMAND = ["/wharf-copy-out-is-never-run"]


def cache_key(folder: ImageFolder) -> str:
    """The folder stem of an image's folder in the node cache (workers.models.storage's form)."""
    digest = hashlib.sha256(f"{folder.image}\n{folder.path}".encode()).hexdigest()[:16]
    name = folder.image.rsplit("/", 1)[-1].split("@")[0].replace(":", "_")
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:60].strip(".") or "image"
    return f"image-{stem}-{digest}"


def copy_out(
    client, folder: ImageFolder, cache_root: Path, docker_auth: str | None, report: Report,
    tenant: bool,
) -> Path:  # fmt: skip
    """The image's folder `folder.path`, copied into the node cache; its path there. Pulls
    the image first where the node lacks it, or always for a tenant's image from a registry.
    Raises InstanceError for what the user must fix, PullError for what may pass."""
    image = _pulled(client, folder.image, docker_auth, report, tenant)
    key = cache_key(folder)
    final = cache_root / f"{key}@{image.id.split(':')[-1][:16]}"
    cache_root.mkdir(parents=True, exist_ok=True)
    with locked(cache_root / f"{key}.lock"):
        if not final.is_dir():
            _extract(client, image.id, folder, cache_root, key, final)
        os.utime(final)  # used now: the prune keeps a source's most recently used copy
    return final


def _pulled(client, name: str, docker_auth: str | None, report: Report, tenant: bool):
    try:
        image = client.images.get(name)
    except ImageNotFound:
        pull(client.api, name, docker_auth, report, node_login=not tenant)
        return client.images.get(name)
    if tenant and image.attrs.get("RepoDigests"):
        pull(client.api, name, docker_auth, report, node_login=False)
        image = client.images.get(name)
    return image


def _extract(
    client, image_id: str, folder: ImageFolder, cache_root: Path, key: str, final: Path
) -> None:
    work = Path(tempfile.mkdtemp(prefix=f".{key}.copy-", dir=cache_root))
    container = client.containers.create(image_id, entrypoint=NO_COMMAND, network_disabled=True)
    try:
        try:
            stream, stat = container.get_archive(folder.path)
        except NotFound:
            raise InstanceError(
                f"image {folder.image} has no {folder.path}; give a folder the image has"
            ) from None
        if not stat.get("mode", 0) & (1 << 31):  # Go's os.ModeDir
            raise InstanceError(f"{folder.path} in image {folder.image} is not a folder")
        archive = work / "folder.tar"
        with archive.open("wb") as handle:
            for chunk in stream:
                handle.write(chunk)
        with tarfile.open(archive) as tar:
            tar.extractall(work / "out", filter="data")  # no links out, no devices, no owners
        top = work / "out" / stat["name"]
        top.chmod(0o755)  # engines in containers may run as another user
        os.rename(top, final)
    except tarfile.TarError as exc:  # else a daemon or disk hiccup: tried again after back-off
        raise InstanceError(
            f"could not copy {folder.path} out of image {folder.image}: {exc}"
        ) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(APIError):
            container.remove(force=True)
