"""The Celery app. Workers reconcile services; beat heals drift every WHARF_RECONCILE_INTERVAL s."""

from __future__ import annotations

import os

import django
from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django.setup()

from django.conf import settings  # noqa: E402

app = Celery("wharf")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    task_acks_late=True,  # a worker that dies mid-reconcile leaves the task for another
    worker_prefetch_multiplier=1,
    beat_schedule={
        "reconcile-all": {
            "task": "workers.tasks.reconcile_all",
            "schedule": float(settings.WHARF_RECONCILE_INTERVAL),
        },
        # Usage counted in Redis reaches the database at most a minute and 15 s late.
        "flush-usage": {"task": "workers.tasks.flush_usage", "schedule": 15.0},
    },
)
app.autodiscover_tasks(["workers"])
