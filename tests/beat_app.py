"""The workers' Celery app with one more entry, for test_beat_takeover: a node-local probe every
WHARF_RECONCILE_INTERVAL seconds, routed to this host's queue as the model-cache prune is (the
prune itself is hourly), so that a test sees every host's beat send its own host's work."""

from __future__ import annotations

from workers.celery import NODE_QUEUE, app

app.conf.beat_schedule = {
    **app.conf.beat_schedule,
    "node-probe": {
        "task": "workers.tasks.prune_model_cache",
        "schedule": app.conf.beat_schedule["reconcile-all"]["schedule"],
        "options": {"queue": NODE_QUEUE, "expires": 60},
    },
}
