"""Publishes the routing snapshot (contracts.routing) that the gateway serves from."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import redis
from django.conf import settings

from contracts.routing import (
    DEFAULT_RATE_LIMIT,
    SNAPSHOT_CHANNEL,
    SNAPSHOT_KEY,
    PdRouting,
    RoutedInstance,
    RoutedKey,
    RoutedService,
    Snapshot,
)
from controlplane.services.choices import DesiredState, InstanceState
from controlplane.services.models import Service
from controlplane.tokens.models import ApiKey

log = logging.getLogger(__name__)


def build_snapshot() -> Snapshot:
    now = time.time()
    # Milliseconds since the epoch: increases across publishers without shared state.
    return Snapshot(
        version=time.time_ns() // 1_000_000, services=_routed_services(), keys=_routed_keys(now)
    )


def _routed_services() -> dict[str, RoutedService]:
    services = {}
    queryset = Service.objects.exclude(desired_state=DesiredState.DELETED).prefetch_related(
        "tokens", "instances"
    )
    for service in queryset:
        services[service.name] = _routed_service(service)
    return services


def _routed_service(service: Service) -> RoutedService:
    ready = [
        RoutedInstance(name=i.name, url=i.url, role=i.role)
        for i in service.instances.all()
        if i.state == InstanceState.READY and i.url
    ]
    if service.desired_state != DesiredState.RUNNING:
        ready = []
    spec = service.spec or {}
    llm = spec.get("llm") or {}
    names = (llm["served_model_name"],) if llm.get("served_model_name") else ()
    # The stored spec passed validation when it was written, so its numbers are numbers.
    rpc = (spec.get("metadata") or {}).get("rpc") or {}
    keepalive = rpc.get("keepalive")
    return RoutedService(
        name=service.name,
        served_model_names=names,
        token_digests=frozenset(t.digest for t in service.tokens.all()),
        instances=tuple(ready),
        rate_limit=int(rpc.get("rate_limit") or DEFAULT_RATE_LIMIT),
        max_queue_size=rpc.get("max_queue_size"),
        timeout=keepalive / 1000 if keepalive else None,  # EAS gives it in milliseconds
        pd=_pd_routing(llm.get("pd")),
    )


def _pd_routing(pd: dict | None) -> PdRouting | None:
    """What the gateway needs to route a prefill/decode-separated service."""
    if not pd:
        return None
    from workers.engines.pd import router_hints  # pure: what each connector asks of the router

    connector = pd.get("kv_connector", "ExampleConnector")
    router = pd.get("router") or {}
    return PdRouting(
        connector=connector,
        prefill_policy=router.get("prefill_policy", "least_outstanding"),
        decode_policy=router.get("decode_policy", "least_outstanding"),
        on_prefill_failure=pd.get("on_prefill_failure", "fail"),
        hints=router_hints(connector),
    )


def _routed_keys(now: float) -> dict[str, RoutedKey]:
    """Every key the gateway should honour. An expired key is left out, and one that expires
    later carries its expiry, which the gateway checks itself: nothing republishes then."""
    active = ApiKey.objects.active(datetime.fromtimestamp(now, tz=UTC))
    return {
        key.digest: RoutedKey(
            id=key.public_id,
            services=None if key.services is None else frozenset(key.services),
            expires_at=key.expires_at.timestamp() if key.expires_at else None,
            rpm=key.rpm,
            tpm=key.tpm,
            max_concurrency=key.max_concurrency,
        )
        for key in active
    }


def publish_snapshot() -> None:
    """Write the snapshot and tell the gateways; a Redis outage is logged, never raised,
    because the gateways keep their last snapshot and the next publish heals it."""
    snapshot = build_snapshot()
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)
        with client:
            current = client.get(SNAPSHOT_KEY)
            if current and _same_routes(Snapshot.from_json(current), snapshot):
                return  # unchanged: spare the gateways a reload
            client.set(SNAPSHOT_KEY, snapshot.to_json())
            client.publish(SNAPSHOT_CHANNEL, str(snapshot.version))
    except redis.RedisError as exc:
        log.warning("could not publish the routing snapshot: %s", exc)


def _same_routes(a: Snapshot, b: Snapshot) -> bool:
    return a.services == b.services and a.keys == b.keys
