"""The hosts that run instances: each worker registers its node and heartbeats; the operator
cordons, drains and uncordons it through the API."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from controlplane.nodes.state import node_state


class Node(models.Model):
    name = models.CharField(max_length=63, unique=True)
    address = models.CharField(max_length=253, help_text="where the gateway reaches instances")
    labels = models.JSONField(default=dict, blank=True)
    # [{"kind": "gpu", "index": 0, "name": "NVIDIA H200", "memory_mb": 143771}, ...]
    cards = models.JSONField(default=list, blank=True)
    cpus = models.PositiveIntegerField(default=0)
    memory_mb = models.PositiveBigIntegerField(default=0)
    # the size of the disk its instances write to (Docker's data root, the process runtime's
    # folder, a Kubernetes node's allocatable ephemeral storage); 0: unknown
    disk_mb = models.PositiveBigIntegerField(default=0)
    runtime = models.CharField(max_length=16, blank=True)
    images = models.JSONField(default=list, blank=True)  # engine images present on the node
    # Models it holds: model-store names and staged object-storage sources (their cache keys);
    # placement prefers a node that has the model already.
    cached_models = models.JSONField(default=list, blank=True)
    version = models.CharField(max_length=32, blank=True)  # of the Wharf worker
    # inventory_digest() of what its heartbeat last wrote; "" when written otherwise. While it
    # stands, a beat writes its time alone and the scheduler keeps the node's offer
    # (workers.scheduling.offers). A default in the database too: a worker of the version
    # before, still running during an upgrade, registers its node without this column.
    inventory_digest = models.CharField(max_length=16, blank=True, default="", db_default="")
    cordoned = models.BooleanField(default=False)
    draining = models.BooleanField(default=False)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    registered_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def state(self) -> str:
        grace = timedelta(seconds=settings.WHARF_NODE_GRACE)
        return node_state(self.heartbeat_at, timezone.now(), grace, self.cordoned, self.draining)


def inventory_digest(inventory: Mapping[str, Any]) -> str:
    """16 hex digits that change whenever anything in a heartbeat's inventory does."""
    text = json.dumps(inventory, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
