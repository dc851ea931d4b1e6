"""Publishes the routing snapshot (contracts.routing) that the gateway serves from."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime

import redis
from django.conf import settings
from django.db.models import Prefetch

from contracts import spec_facts
from contracts.canary import ACTIVE as CANARY_ACTIVE
from contracts.engines import engine_name
from contracts.routing import (
    DEFAULT_RATE_LIMIT,
    DEFAULT_SESSION_HEADER,
    SNAPSHOT_CHANNEL,
    SNAPSHOT_KEY,
    PdRouting,
    RequestLogRouting,
    RoutedInstance,
    RoutedKey,
    RoutedService,
    Snapshot,
)
from contracts.spec import Pd, Rpc, ServiceSpec, typed_spec
from contracts.spec_gateway_policy import policy_limit, service_rate_limit
from contracts.spec_job import is_job
from contracts.spec_queue import is_async, window
from contracts.spec_request_log import logged
from controlplane import redis_clients
from controlplane.queues.models import QueueItem, QueueName
from controlplane.services import publisher
from controlplane.services.choices import DesiredState, InstanceState
from controlplane.services.events import record_once
from controlplane.services.groups import routed_groups
from controlplane.services.models import Canary, Instance, Service, ServiceGroup
from controlplane.tokens.models import ApiKey

log = logging.getLogger(__name__)


# Each service's entry in the published snapshot, as a digest, and that snapshot's version: a
# scheduling pass that changed no route leaves the snapshot alone (publish_for).
ENTRIES = "wharf:snapshot:entries"
_VERSION = "@version"
_HEAD = re.compile(rb'^\{"version": (\d+)')  # Snapshot.to_json writes the version first


def build_snapshot() -> Snapshot:
    now = time.time()
    services = _routed_services()
    # Milliseconds since the epoch: increases across publishers without shared state.
    return Snapshot(
        version=time.time_ns() // 1_000_000, services=services, keys=_routed_keys(now),
        groups=routed_groups({name: svc.session_header for name, svc in services.items()}),
    )  # fmt: skip


def _routed_services() -> dict[str, RoutedService]:
    """Every live service the gateway can route. One it cannot (a spec stored before a rule
    tightened, a value nothing expected) is left out with an event saying why: it must never
    stop the snapshot, and with it every other service's routing and key changes."""
    services = {}
    queryset = _live()
    rows = _instance_rows(queryset)
    fed = _fed(queryset)
    for service in queryset:
        try:
            routed = _routed_service(service, typed_spec(service.plain_spec()), rows[service.pk])
            services[service.name] = replace(routed, fed=service.pk in fed)
        except Exception as exc:  # an isolation boundary: this service only
            log.warning("routing snapshot: leaving out %s: %s", service.name, exc)
            record_once(service, "Unroutable", f"left out of the gateways' routing: {exc}")
    return services


def _live():
    """The services a snapshot routes, with what an entry reads of each prefetched."""
    active = Prefetch("canaries", queryset=Canary.objects.filter(state__in=CANARY_ACTIVE))
    live = Service.objects.exclude(desired_state=DesiredState.DELETED)
    return live.prefetch_related("tokens", active)


def _fed(services) -> set[int]:
    """Those of `services` with OpenAI batch work waiting in their input queue."""
    queued = QueueItem.objects.filter(queue=QueueName.INPUT, batch__isnull=False)
    return set(queued.filter(service__in=services).values_list("service_id", flat=True).distinct())


def _instance_rows(services) -> dict[int, list[dict]]:
    """The routing fields of every instance of `services`, by service: plain values, not
    model objects, which were most of a rebuild's cost at fleet size (benchmarks/README.md,
    "Fleet at scale"), and a rebuild follows every change."""
    rows: dict[int, list[dict]] = defaultdict(list)
    for row in Instance.objects.filter(service__in=services).values(*_ROUTED_FIELDS):
        rows[row["service_id"]].append(row)
    return rows


_ROUTED_FIELDS = (
    "service_id", "name", "url", "role", "state", "engine_key_name", "adapters", "track",
    "gang", "rank",
)  # fmt: skip


def _routed_service(service: Service, spec: ServiceSpec, rows: list[dict]) -> RoutedService:
    ready = [
        RoutedInstance(
            name=i["name"],
            url=i["url"],
            role=i["role"],
            key=i["engine_key_name"],
            adapters=tuple(i["adapters"].get("loaded") or ()) if i["adapters"] else None,
            track=i["track"],
        )  # fmt: skip
        for i in rows
        if i["state"] == InstanceState.READY and i["url"] and _serves(i, rows)
    ]
    if service.desired_state != DesiredState.RUNNING:
        ready = []
    rpc = spec.metadata.rpc or Rpc()
    policy = spec.networking.gateway_policy if spec.networking else None
    pd = spec.llm.pd if spec.llm else None
    return RoutedService(
        name=service.name,
        served_model_names=spec.served_model_names,
        token_digests=frozenset(t.digest for t in service.tokens.all()),
        sealed_tokens=frozenset(t.sealed for t in service.tokens.all() if t.sealed),
        instances=tuple(ready),
        rate_limit=service_rate_limit(rpc.rate_limit, policy) or DEFAULT_RATE_LIMIT,
        max_queue_size=rpc.max_queue_size,
        timeout=rpc.keepalive / 1000 if rpc.keepalive else None,  # EAS gives milliseconds
        worker_threads=rpc.worker_threads,
        concurrency_limit=policy_limit(policy.concurrency_limit) if policy else None,
        pd=_pd_routing(pd, spec_facts.routing_policy(spec)),
        routing=spec_facts.routing_policy(spec),
        session_header=rpc.session_header or DEFAULT_SESSION_HEADER,
        # With min 0 somewhere, the gateways hold a request that finds no instance, and the
        # autoscaler starts one (contracts.inflight's "held").
        scale_from_zero=any(s.min == 0 for _, s in spec_facts.autoscalers(spec).values()),
        adapters=spec_facts.adapter_names(spec),
        engine=engine_name(spec),
        webservice=spec.metadata.enable_webservice,
        job=is_job(spec),
        mirror_targets=tuple(service.mirror.get("targets") or ()),
        mirror_ratio=int(service.mirror.get("ratio") or 0),
        canary_weight=_canary_weight(service),
        queued=is_async(spec),
        queue_window=window(spec) if is_async(spec) else 0,
        request_log=_request_log(spec),
    )


def _serves(row: dict, rows: list[dict]) -> bool:
    """An instance on one host serves when ready; one across hosts (workers.scheduling.gangs)
    through its leader alone, and only while every member of its gang runs."""
    if not row["gang"]:
        return True
    running = (InstanceState.STARTING, InstanceState.READY)
    return row["rank"] == 0 and all(
        r["state"] in running for r in rows if r["gang"] == row["gang"]
    )  # fmt: skip


def _request_log(spec: ServiceSpec) -> RequestLogRouting | None:
    """The gateways' part of the spec's request_log, when it is enabled."""
    settings = logged(spec)
    if settings is None:
        return None
    return RequestLogRouting(settings.keep_days, settings.max_body_bytes)


def _canary_weight(service: Service) -> int:
    """Its active canary's share of the calls (prefetched: `canaries`), 0 without one."""
    active = list(service.canaries.all())
    return active[0].weight if active else 0


def _pd_routing(pd: Pd | None, prefill_policy: str) -> PdRouting | None:
    """What the gateway needs to route a prefill/decode-separated service."""
    if pd is None:
        return None
    from contracts.engines.pd import router_hints  # pure: what each connector asks of the router

    return PdRouting(
        connector=pd.kv_connector,
        prefill_policy=prefill_policy,
        decode_policy=pd.router.decode_policy,
        on_prefill_failure=pd.on_prefill_failure,
        hints=router_hints(pd.kv_connector),
    )


def _routed_keys(now: float) -> dict[str, RoutedKey]:
    """Every key the gateway should honour. An expired key is left out, and one that expires
    later carries its expiry, which the gateway checks itself: nothing republishes then. A key
    for every service (null) reaches every service and group of its workspace, listed by name:
    the snapshot is published again whenever a service is created or deleted."""
    active = ApiKey.objects.active(datetime.fromtimestamp(now, tz=UTC))
    by_workspace: dict[int, set[str]] = {}
    for workspace, name in Service.objects.exclude(desired_state=DesiredState.DELETED).values_list(
        "workspace_id", "name"
    ):
        by_workspace.setdefault(workspace, set()).add(name)
    for workspace, name in ServiceGroup.objects.values_list("workspace_id", "name"):
        by_workspace.setdefault(workspace, set()).add(name)  # and its groups' endpoints
    return {
        key.digest: RoutedKey(
            id=key.public_id,
            services=frozenset(
                by_workspace.get(key.workspace_id, ()) if key.services is None else key.services
            ),
            expires_at=key.expires_at.timestamp() if key.expires_at else None,
            rpm=key.rpm,
            tpm=key.tpm,
            max_concurrency=key.max_concurrency,
            sealed_token=key.sealed,
        )
        for key in active
    }


def publish_snapshot(force: bool = False) -> None:
    """Write the snapshot and tell the gateways; a Redis outage is logged, never raised,
    because the gateways keep their last snapshot and the next publish heals it. Unchanged
    routes are not published again unless `force`: a drain needs a version at least as new
    as the drain, even when the drained instance was not routed (contracts.inflight). Calls
    at once share a build (controlplane.services.publisher)."""
    try:
        client = redis_clients.shared(settings.REDIS_URL, socket_timeout=5)
        publisher.publish(client, lambda forced: _write(client, forced), force)
    except redis.RedisError as exc:
        log.warning("could not publish the routing snapshot: %s", exc)


def publish_for(name: str, force: bool = False) -> None:
    """After a pass over one service (or its deletion): the gateways get its entry as it is
    now. Unchanged (a pass that only placed instances on their way up changes no route),
    nothing is written; changed, new or gone, only its entry is put in or taken out of the
    published snapshot, with the keys and groups again when a service came or went (the build
    reads the whole fleet, an entry only its own rows); a whole build when the patch cannot
    stand for one (`_patch`). `force`: a new version even when nothing changed."""
    try:
        client = redis_clients.shared(settings.REDIS_URL, socket_timeout=5)
        # A patch while nothing else publishes; else the publish shared with the others asking
        # now (patches one after the other under the lease would not keep up with a burst's
        # instances turning ready: benchmarks/README.md, "Fleet at scale").
        if (not force and _published_as_is(client, name)) or publisher.exclusively(
            client, lambda: _patch(client, name, force), wait=0
        ):
            return
    except redis.RedisError:
        pass  # the publish says why
    publish_snapshot(force)


def _published_as_is(client: redis.Redis, name: str) -> bool:
    """Whether the published snapshot has the service's entry as a build now would make it:
    read outside the lease, so a cheap no before the patch looks again under it."""
    published = _published_digest(client, name)
    entry = _entry(name)
    return published is not None and published == (entry[0] if entry else "")


def _published_digest(client: redis.Redis, name: str) -> str | None:
    """The digest of the service's published entry ("" when it has none); None when the
    digests do not describe the snapshot in Redis (written by something else)."""
    with client.pipeline(transaction=False) as pipe:
        pipe.getrange(SNAPSHOT_KEY, 0, 40)
        pipe.hmget(ENTRIES, _VERSION, name)
        snapshot, (version, digest) = pipe.execute()
    found = _HEAD.match(snapshot or b"")
    if found is None or version is None or found.group(1) != version:
        return None
    return digest.decode() if digest else ""


def _entry(name: str) -> tuple[str, str] | None:
    """The service's entry as a build now would make it, and its digest; None when a build
    leaves it out for good (deleted), _UNROUTABLE when the build would say why it does."""
    service = _live().filter(name=name).first()
    if service is None:
        return None
    try:
        rows = list(Instance.objects.filter(service=service).values(*_ROUTED_FIELDS))
        routed = _routed_service(service, typed_spec(service.plain_spec()), rows)
    except Exception:
        return _UNROUTABLE
    text = Snapshot(services={name: replace(routed, fed=bool(_fed([service])))}).to_json()
    return _hash(text), text


_UNROUTABLE = ("unroutable", "")  # a digest no entry has


def _patch(client: redis.Redis, name: str, force: bool = False) -> bool:
    """Under the publishing lease: put the service's entry as it is now into the published
    snapshot (or take it out, deleted), with the keys and groups again when the set of
    routed services or a session header changed, and tell the gateways; True when the
    snapshot now has it as it is. Unchanged, nothing is written unless `force` (a new
    version all the same: a drain waits for one). False when only a build will do: the
    snapshot is not the one the digests describe, or the service is unroutable (the build
    records why)."""
    entry = _entry(name)  # read under the lease: a patch never writes rows older than the last
    published = _published_digest(client, name)
    if published is None or entry is _UNROUTABLE:
        return False
    if published == (entry[0] if entry else "") and not force:
        return True
    snapshot = json.loads(client.get(SNAPSHOT_KEY) or b"{}")
    services = snapshot["services"]
    old = services.pop(name, None)
    if entry is not None:
        services[name] = json.loads(entry[1])["services"][name]
    header = old and old.get("session_header")
    if old is None or entry is None or header != services[name].get("session_header"):
        _rekey(snapshot)
    snapshot["services"] = dict(sorted(services.items()))
    version = _after(int(snapshot["version"]))
    snapshot["version"] = version  # first, as Snapshot.to_json writes it (_HEAD)
    with client.pipeline() as pipe:
        pipe.set(SNAPSHOT_KEY, json.dumps(snapshot))
        pipe.hset(ENTRIES, _VERSION, str(version))
        if entry is None:
            pipe.hdel(ENTRIES, name)
        else:
            pipe.hset(ENTRIES, name, entry[0])
        pipe.publish(SNAPSHOT_CHANNEL, str(version))
        pipe.execute()
    return True


def _rekey(snapshot: dict) -> None:
    """The keys and groups of a published `snapshot` (as JSON) again, for its services: a key
    for every service of its workspace lists them, a group names its routed members."""
    headers = {name: entry["session_header"] for name, entry in snapshot["services"].items()}
    fresh = json.loads(
        Snapshot(keys=_routed_keys(time.time()), groups=routed_groups(headers)).to_json()
    )
    snapshot["keys"], snapshot["groups"] = fresh["keys"], fresh["groups"]


def _digest(name: str, service: RoutedService) -> str:
    return _hash(Snapshot(services={name: service}).to_json())


def _after(published: int) -> int:
    """A version for what replaces the `published` one: milliseconds since the epoch (so it
    grows across publishers without shared state), and newer than it whatever the clocks."""
    return max(time.time_ns() // 1_000_000, published + 1)


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


def _write(client: redis.Redis, force: bool) -> None:
    snapshot = build_snapshot()
    current = client.get(SNAPSHOT_KEY)
    head = _HEAD.match(current or b"")
    if head is not None:  # newer than any before
        snapshot = replace(snapshot, version=_after(int(head.group(1))))
    if not force and current:
        published = Snapshot.from_json(current)
        if _same_routes(published, snapshot):  # unchanged: spare the gateways a reload
            if client.hget(ENTRIES, _VERSION) != str(published.version).encode():
                _entries(client, published.version, snapshot)  # the same routes
            return
    with client.pipeline() as pipe:  # the snapshot and its entries' digests, together
        pipe.set(SNAPSHOT_KEY, snapshot.to_json())
        _entries(pipe, snapshot.version, snapshot)
        pipe.publish(SNAPSHOT_CHANNEL, str(snapshot.version))
        pipe.execute()


def _entries(client: redis.Redis, version: int, snapshot: Snapshot) -> None:
    digests = {name: _digest(name, svc) for name, svc in snapshot.services.items()}
    client.delete(ENTRIES)
    client.hset(ENTRIES, mapping={_VERSION: str(version), **digests})


def _same_routes(a: Snapshot, b: Snapshot) -> bool:
    return a.services == b.services and a.keys == b.keys and a.groups == b.groups
