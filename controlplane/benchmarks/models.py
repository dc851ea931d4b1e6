"""A benchmark run of a service (`wharf bench static|dynamic`), stored as the CLI measured it."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from controlplane.services.models import Service


class BenchmarkRun(models.Model):
    """One run: its kind, the options it ran with, and one row of figures per point (a
    concurrency and length pair, or a request rate). Rows are validated on the way in
    (controlplane.benchmarks.validation) and only read back, so they stay JSON."""

    KINDS = (("static", "static"), ("dynamic", "dynamic"))

    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="benchmark_runs")
    kind = models.CharField(max_length=16, choices=KINDS)
    parameters = models.JSONField()
    rows = models.JSONField()
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["service", "-created_at"], name="benchmark_run_newest")]
