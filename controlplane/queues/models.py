"""The queues of Async services (contracts.spec_queue): one row per item, in the database so that
nothing accepted is lost when any Wharf process restarts. An item's id is its index: EAS's
indexes only need to grow within a queue."""

from __future__ import annotations

from django.db import models


class QueueName(models.TextChoices):
    INPUT = "input"
    SINK = "sink"


class ItemState(models.TextChoices):
    PENDING = "pending"  # input: waiting for an instance; sink: an answer to take
    WORKING = "working"  # input: handed to an instance, leased by a gateway until lease_until


class QueueItem(models.Model):
    id = models.BigAutoField(primary_key=True)
    service = models.ForeignKey(
        "services.Service", on_delete=models.CASCADE, related_name="queue_items"
    )
    queue = models.CharField(max_length=8, choices=QueueName.choices)
    request_id = models.CharField(max_length=64, db_index=True)
    data = models.BinaryField()
    tags = models.JSONField(default=dict, blank=True)
    priority = models.PositiveSmallIntegerField(default=0)  # EAS's _priority_: 1 goes first
    # Where its instance is called: the path after /api/predict/<service>, and the body's type.
    path = models.CharField(max_length=1024, blank=True)
    content_type = models.CharField(max_length=128, blank=True)
    key_id = models.CharField(max_length=64, blank=True)  # the API key that put it; "" a token
    state = models.CharField(max_length=8, choices=ItemState.choices, default=ItemState.PENDING)
    deliveries = models.PositiveSmallIntegerField(default=0)
    holder = models.CharField(max_length=64, blank=True)  # the gateway working on it
    instance = models.CharField(max_length=64, blank=True)  # the instance it was handed to
    lease_until = models.DateTimeField(null=True, blank=True)
    status = models.PositiveSmallIntegerField(null=True, blank=True)  # sink: the answer's code
    created_at = models.DateTimeField(auto_now_add=True)
    # A request of OpenAI's Batch API (controlplane.batches) on a Standard service: after
    # online calls and Async items, and its answer goes to the batch's output file.
    batch = models.ForeignKey(
        "batches.Batch", on_delete=models.CASCADE, null=True, blank=True, related_name="items"
    )
    custom_id = models.CharField(max_length=512, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["service", "queue", "state", "-priority", "id"]),
            models.Index(fields=["state", "lease_until"]),
        ]
