"""The node agent's side of writable object-storage mounts (workers.models.writable_storage):
what an instance's engine wrote is uploaded now and then while it runs, and once more when it
stops."""

from __future__ import annotations

from django.conf import settings

from controlplane.services.events import record
from controlplane.services.models import Instance
from workers.models import writable_storage


def due(row: Instance) -> bool:
    """Whether the instance has writable copies on this node and their upload is due."""
    folder, every = settings.WHARF_WRITABLE_DIR / row.name, settings.WHARF_STORAGE_SYNC_SECONDS
    return folder.is_dir() and writable_storage.due(row.name, every)


def sync(row: Instance) -> set[str]:
    """Uploads what changed in the instance's writable copies (nothing changes state)."""
    spec = row.placed_spec()
    if spec is None:
        return set()
    return writable_storage.sync_instance(settings.WHARF_WRITABLE_DIR, row.name, spec)


def release(row: Instance) -> None:
    """The last upload of a stopped instance's writable copies; a failure is an event, and
    the copies stay on the node (WHARF_WRITABLE_DIR/<instance>) for the operator."""
    try:
        writable_storage.release(settings.WHARF_WRITABLE_DIR, row.name, row.placed_spec())
    except writable_storage.WritableStorageError as exc:
        record(row.service, "StorageSyncFailed",
               f"{exc}; the instance's copy is kept on node {row.node}", row.name)  # fmt: skip
