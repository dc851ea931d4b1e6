"""Publishes the routing snapshot (contracts.routing) that the gateway serves from."""

from __future__ import annotations

import logging
import time

import redis
from django.conf import settings

from contracts.routing import (
    SNAPSHOT_CHANNEL,
    SNAPSHOT_KEY,
    RoutedInstance,
    RoutedService,
    Snapshot,
)
from controlplane.services.choices import DesiredState, InstanceState
from controlplane.services.models import Service

log = logging.getLogger(__name__)


def build_snapshot() -> Snapshot:
    services = {}
    queryset = Service.objects.exclude(desired_state=DesiredState.DELETED).prefetch_related(
        "tokens", "instances"
    )
    for service in queryset:
        ready = [
            RoutedInstance(name=i.name, url=i.url)
            for i in service.instances.all()
            if i.state == InstanceState.READY and i.url
        ]
        if service.desired_state != DesiredState.RUNNING:
            ready = []
        llm = (service.spec or {}).get("llm") or {}
        names = (llm["served_model_name"],) if llm.get("served_model_name") else ()
        services[service.name] = RoutedService(
            name=service.name,
            served_model_names=names,
            token_digests=frozenset(t.digest for t in service.tokens.all()),
            instances=tuple(ready),
        )
    # Milliseconds since the epoch: increases across publishers without shared state.
    return Snapshot(version=time.time_ns() // 1_000_000, services=services)


def publish_snapshot() -> None:
    """Write the snapshot and tell the gateways; a Redis outage is logged, never raised,
    because the gateways keep their last snapshot and the next publish heals it."""
    snapshot = build_snapshot()
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)
        with client:
            current = client.get(SNAPSHOT_KEY)
            if current and Snapshot.from_json(current).services == snapshot.services:
                return  # unchanged: spare the gateways a reload
            client.set(SNAPSHOT_KEY, snapshot.to_json())
            client.publish(SNAPSHOT_CHANNEL, str(snapshot.version))
    except redis.RedisError as exc:
        log.warning("could not publish the routing snapshot: %s", exc)
