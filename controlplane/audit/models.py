"""The audit trail: one row per change made through the API or the console (and by the
operator's commands), who made it and how; refused attempts (403) too. Never a body: no
secret can reach it."""

from __future__ import annotations

from django.db import models


class AuditEntry(models.Model):
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    workspace = models.ForeignKey(
        "workspaces.Workspace", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor = models.CharField(max_length=150, help_text="the user's name")
    via = models.CharField(max_length=120, help_text="token <name> | console | command <name>")
    action = models.CharField(max_length=300, help_text="METHOD /path, or the command")
    status = models.PositiveSmallIntegerField(null=True, blank=True, help_text="HTTP status")
    service = models.CharField(max_length=63, blank=True, help_text="the service it concerned")

    class Meta:
        ordering = ["-at", "-id"]
