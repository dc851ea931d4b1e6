from __future__ import annotations

from django.db import models


class UsageRecord(models.Model):
    """What one key (or a service's own token: contracts.usage.SERVICE_TOKEN_ID) used of one
    service in one minute, as the gateways counted it."""

    minute = models.DateTimeField(help_text="the minute's start, UTC")
    service = models.CharField(max_length=63)
    key_id = models.CharField(max_length=32, help_text="ApiKey.public_id, or '-'")
    adapter = models.CharField(
        max_length=64, blank=True, default="", help_text="the LoRA adapter called; '': the model"
    )
    # The service's workspace when the minute was flushed (null: the service and the key were
    # both gone by then; staff still see the row).
    workspace = models.ForeignKey(
        "workspaces.Workspace", null=True, blank=True, on_delete=models.CASCADE,
        related_name="+",
    )  # fmt: skip
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    requests = models.PositiveBigIntegerField(default=0)
    latency_ms = models.PositiveBigIntegerField(default=0, help_text="sum over the requests")
    ttft_ms = models.PositiveBigIntegerField(default=0, help_text="sum of time to first byte")
    # Of the above, what requests of OpenAI batches used (controlplane.batches).
    batch_requests = models.PositiveBigIntegerField(default=0)
    batch_prompt_tokens = models.PositiveBigIntegerField(default=0)
    batch_completion_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        # The unique index leads with `minute`, so it also serves the API's time-range
        # queries; a separate index on `minute` would only slow the flush down.
        constraints = [
            models.UniqueConstraint(
                fields=["minute", "service", "key_id", "adapter"],
                name="usage_one_row_per_minute_and_adapter",
            )
        ]
        ordering = ["minute", "service", "key_id"]


class UsageBatch(models.Model):
    """One Redis hash the flush wrote into UsageRecord, named by its claim-unique flushing key
    (contracts.usage.flushing_key). Inserted in the same transaction as the counts, so a
    flushing key still in Redis with a row here was already counted and is only deleted."""

    name = models.CharField(max_length=200, unique=True, help_text="the flushing key")
    flushed_at = models.DateTimeField(db_index=True, help_text="pruned after a day")
