from __future__ import annotations

import logging

from controlplane.services.models import Event, Service

log = logging.getLogger("wharf.events")


def record(service: Service, reason: str, message: str, instance: str = "") -> Event:
    log.info("%s %s%s: %s", service.name, reason, f" [{instance}]" if instance else "", message)
    return Event.objects.create(service=service, instance=instance, reason=reason, message=message)
