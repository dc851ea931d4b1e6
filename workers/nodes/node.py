"""This host as a node of the fleet: what it offers (cards, CPUs, memory, engine images), written
to its Node row when the worker starts and on every heartbeat after, from a thread of the
worker. A node whose heartbeats stop is `not_ready` after WHARF_NODE_GRACE seconds."""

from __future__ import annotations

import logging
import os
import shutil
import threading
from dataclasses import asdict

from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from contracts.version import VERSION
from controlplane.nodes.models import Node, inventory_digest
from controlplane.nodes.state import parse_labels
from workers.models.hub_cache import cached_repositories
from workers.models.storage import cached_sources
from workers.nodes import devices

log = logging.getLogger(__name__)
CARDS = devices.DeviceCache()
MAX_IMAGES = 200  # tags reported per node


def memory_mb() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)


def disk_mb(runtime) -> int:
    """The size of the disk this node's instances write to: Docker's data root, or the
    process runtime's instance folder; 0 when it cannot be read (not a constraint then)."""
    try:
        where = runtime.client.info()["DockerRootDir"] if runtime.name == "docker" else None
        where = where or getattr(runtime, "state_dir", None)
        return shutil.disk_usage(where).total // (1024 * 1024) if where else 0
    except Exception:  # a daemon away, a folder not visible here: unknown
        return 0


def engine_images(runtime) -> list[str]:
    """What the node can start without a pull: Docker image tags, or the process runtime's
    vLLM virtualenv."""
    if runtime.name == "docker":
        tags = sorted(tag for image in runtime.client.images.list() for tag in image.tags)
        return tags[:MAX_IMAGES]
    venv = getattr(runtime, "venv", None)
    return [f"venv:{venv}"] if venv and os.path.isdir(venv) else []


def local_models() -> list[str]:
    """Model-store names, staged sources' cache keys and hub repositories (hf://org/name)
    on this node (at most MAX_IMAGES)."""
    try:
        store = sorted(p.name for p in settings.WHARF_MODEL_DIR.iterdir() if p.is_dir())
    except OSError:  # no model store on this node
        store = []
    cached = sorted(cached_sources(settings.WHARF_CACHE_DIR))
    return (store + cached + cached_repositories(settings.WHARF_CACHE_DIR))[:MAX_IMAGES]


def inventory(runtime) -> dict:
    cards = [{k: v for k, v in asdict(card).items() if k != "uuid"} for card in CARDS.get()]
    return {
        "address": settings.WHARF_NODE_ADDRESS,
        "labels": parse_labels(settings.WHARF_NODE_LABELS),
        "cards": cards,
        "cpus": os.cpu_count() or 0,
        "memory_mb": memory_mb(),
        "disk_mb": disk_mb(runtime),
        "runtime": runtime.name,
        "images": engine_images(runtime),
        "cached_models": local_models(),
        "version": VERSION,
    }


def heartbeat(runtime) -> bool:
    """Register this node or refresh it; the operator's cordon and drain marks are kept.
    Whether its inventory was written: a beat that finds it as last written writes only its
    time (one narrow UPDATE, and the scheduler keeps the node's offer)."""
    found = inventory(runtime)
    digest = inventory_digest(found)
    now = timezone.now()
    name = settings.WHARF_NODE_NAME
    if Node.objects.filter(name=name, inventory_digest=digest).update(heartbeat_at=now):
        return False
    Node.objects.update_or_create(
        name=name, defaults={**found, "inventory_digest": digest, "heartbeat_at": now}
    )
    return True


class Heartbeat(threading.Thread):
    """Beats until stop(); a beat that fails (database or Docker away) is logged and retried."""

    def __init__(self, runtime, interval: float):
        super().__init__(name="wharf-node-heartbeat", daemon=True)
        self.runtime, self.interval = runtime, interval
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                close_old_connections()
                heartbeat(self.runtime)
            except (DatabaseError, OSError, ValueError) as exc:
                log.warning("node %s: heartbeat failed: %s", settings.WHARF_NODE_NAME, exc)
            except Exception:  # a thread that dies silently would make the node look dead
                log.exception("node %s: heartbeat failed", settings.WHARF_NODE_NAME)
            self._stopped.wait(self.interval)

    def stop(self) -> None:
        self._stopped.set()
