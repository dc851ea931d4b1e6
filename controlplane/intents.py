"""What the API asks of the workers, by Celery task name and Redis key (contracts), never by
importing them: the API records intent in the database; the workers act on it."""

from __future__ import annotations

from functools import cache

import redis
from celery import Celery
from django.conf import settings

from contracts import beat, node_logs, node_tokenizer, reconcile
from controlplane import redis_clients
from controlplane.services.models import Service


@cache
def _celery() -> Celery:
    """A producer with the workers' broker settings; it sends, it never runs a task."""
    app = Celery("wharf-api", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    return app


def warm() -> None:
    """Find the producer's parts now, not at the first ask (Celery reads its packages' entry
    points for them: about 0.1 s). Nothing connects."""
    _celery().backend  # noqa: B018 (the property loads them)


def _redis() -> redis.Redis:
    return redis_clients.shared(settings.REDIS_URL)


def reconcile_service(name: str) -> None:
    """A pass of service `name` soon (asks while one is queued coalesce)."""
    reconcile.ask(_redis(), _celery(), name)


def reconcile_every_service() -> None:
    """A pass of every service, without waiting for the periodic one."""
    for name in Service.objects.values_list("name", flat=True):
        reconcile_service(name)


def instance_log(node: str, instance: str, tail: int) -> str | None:
    """The last `tail` lines of `instance`'s log, read on `node`; None if it does not answer."""
    return node_logs.fetch(_redis(), node, instance, tail)


def tokenizer_files(node: str, instance: str) -> dict | None:
    """The tokenizer of `instance`'s model, read on `node`: {"files": …} or {"error": …};
    None if the node does not answer."""
    return node_tokenizer.fetch(_redis(), node, instance)


def beat_leadership() -> dict:
    """Which worker host's beat sends the fleet-wide periodic tasks, and its handovers."""
    return beat.leadership(_redis())
