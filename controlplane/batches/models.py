"""OpenAI's Files and Batches (contracts.batch), each of one workspace: the API key that made
it belongs there, and another workspace's keys never see it. A batch's requests run as queue
items (controlplane.queues.models.QueueItem with `batch`) on the services their models name."""

from __future__ import annotations

from django.db import models

from contracts import batch as contract


class File(models.Model):
    id = models.CharField(max_length=40, primary_key=True)  # file-…
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="batch_files"
    )
    key_id = models.CharField(max_length=64)
    filename = models.CharField(max_length=255)
    purpose = models.CharField(max_length=32)
    bytes = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]


class Batch(models.Model):
    id = models.CharField(max_length=40, primary_key=True)  # batch_…
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="batches"
    )
    key_id = models.CharField(max_length=64)
    endpoint = models.CharField(max_length=64)
    input_file_id = models.CharField(max_length=40)
    output_file_id = models.CharField(max_length=40, blank=True)
    error_file_id = models.CharField(max_length=40, blank=True)
    completion_window = models.CharField(max_length=8, default=contract.COMPLETION_WINDOW)
    status = models.CharField(max_length=16, default=contract.VALIDATING)
    metadata = models.JSONField(null=True, blank=True)
    # The error-file lines of the input lines that could not run (read when it was created).
    rejected = models.JSONField(default=list, blank=True)
    # The same lines as OpenAI's batch `errors` name them: code, message, param and line number.
    line_errors = models.JSONField(default=list, blank=True)
    total = models.PositiveIntegerField(default=0)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    in_progress_at = models.DateTimeField(null=True, blank=True)
    finalizing_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    cancelling_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["workspace", "status"])]
