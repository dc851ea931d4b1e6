from __future__ import annotations

import logging

from controlplane.audit import actor
from controlplane.services.models import Event, Service

log = logging.getLogger("wharf.events")


def record(service: Service, reason: str, message: str, instance: str = "") -> Event:
    """An event of `service`, with the actor of the request being served (none in a worker)."""
    log.info("%s %s%s: %s", service.name, reason, f" [{instance}]" if instance else "", message)
    return Event.objects.create(service=service, instance=instance, reason=reason, message=message,
                                actor=actor.current())  # fmt: skip


def record_each(service: Service, events: list[tuple[str, str, str]]) -> None:
    """Several events of `service` at once, each (reason, message, instance), in one insert:
    a placing pass's one per instance, written while it holds the placement lock."""
    who = actor.current()
    for reason, message, instance in events:
        log.info("%s %s%s: %s", service.name, reason, f" [{instance}]" if instance else "", message)
    Event.objects.bulk_create(
        Event(service=service, instance=instance, reason=reason, message=message, actor=who)
        for reason, message, instance in events
    )


def record_once(service: Service, reason: str, message: str, instance: str = "") -> Event | None:
    """Record unless the service's latest event says the same: a condition found on every
    pass (a spec the gateway cannot route) is one event, not one per pass."""
    latest = service.events.order_by("-id").first()
    if latest and (latest.reason, latest.message, latest.instance) == (reason, message, instance):
        return None
    return record(service, reason, message, instance)
