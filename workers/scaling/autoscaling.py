"""The autoscaler's loop: every INTERVAL seconds, on whichever worker holds the pass's lease,
it reads what the gateways report (requests/s, in flight, held: contracts.inflight) and what
the nodes scraped from the engines (waiting requests, KV-cache usage: contracts.engine_load),
and what they sampled of their instances' CPU and cards (contracts.instance_usage),
asks workers.scaling.autoscaler for each autoscaled role's count, and writes it to the service's
`autoscale` with an event giving the numbers whenever a count changes. The scheduler reads
the count (contracts.spec_facts.replicas) on the pass this queues, and adds or drains
instances as for any change of count.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from django.db.models import Q

from contracts import engine_load, inflight, instance_usage, spec_facts, spec_scaling
from contracts.spec import SpecError
from contracts.spec_cron import latest_fire
from contracts.spec_fleet import MAX_INSTANCES
from contracts.spec_queue import is_async
from controlplane.queues import store as queue_store
from controlplane.services.choices import DesiredState, InstanceState
from controlplane.services.events import record
from controlplane.services.models import Service
from workers.locks import LeasedPasses, client
from workers.scaling.autoscaler import Signals, State, decide, scheduled

log = logging.getLogger(__name__)
INTERVAL = 2.0  # seconds between two passes over every autoscaled service
LOCK = "wharf:autoscaler"

AUTOSCALED = (
    Q(spec__has_key="autoscaler")
    | Q(spec__has_key="cronscaler")
    | Q(spec__llm__pd__prefill__has_key="autoscaler")
    | Q(spec__llm__pd__decode__has_key="autoscaler")
)


def autoscale_all(redis_client, now: float | None = None) -> set[str]:
    """One pass over every autoscaled service; the names of those whose counts changed."""
    now = time.time() if now is None else now
    qps, in_flight, held = inflight.service_load(inflight.read_reports(redis_client))
    changed = set()
    services = Service.objects.filter(desired_state=DesiredState.RUNNING).filter(
        AUTOSCALED | ~Q(autoscale={})
    )
    for service in services:
        try:
            spec = service.parsed_spec()
        except SpecError:
            continue  # the scheduler reports an unreadable spec
        load = _Load(qps.get(service.name, 0.0), in_flight, held.get(service.name, 0))
        if _autoscale(service, spec, load, redis_client, now):
            changed.add(service.name)
    return changed


@dataclass(frozen=True)
class _Load:
    """What the gateways report for one service."""

    qps: float  # requests/s, summed over the gateways
    in_flight: dict[str, int]  # per instance, every service's
    held: int  # requests held while none of its instances runs


def _autoscale(service: Service, spec, load: _Load, redis_client, now: float) -> bool:
    scalers: dict[str, spec_scaling.Autoscaler | None] = {
        role: scaler for role, (_, scaler) in spec_facts.autoscalers(spec).items()
    }
    cron = spec.cronscaler if not (spec.llm and spec.llm.pd) else None
    if cron is not None:
        scalers.setdefault("", None)
    starts = spec_facts.replicas(spec)
    ready = [i for i in service.instances.all() if i.state == InstanceState.READY and i.url]
    decided, changed = {}, False
    for role, scaler in scalers.items():
        low, high = (scaler.min, scaler.max) if scaler else (0, MAX_INSTANCES)
        start = min(max(starts[role], low), high)
        before = State.from_json(service.autoscale.get(role), default=start, now=now)
        before = replace(before, replicas=min(max(before.replicas, low), high))
        fire = latest_fire(cron, now) if cron is not None and role == "" else None
        state, floor, why = scheduled(before, fire, low, high, now)
        if scaler is not None:
            if floor is not None:
                scaler = scaler.model_copy(update={"min": max(scaler.min, floor)})
            mine = [i.name for i in ready if i.role == role]
            signals = _signals(mine, load, redis_client, now, spec.metadata.cpu)
            if is_async(spec):  # its queue is its load: the items waiting and in work
                backlog = queue_store.backlog(service)
                items = backlog["pending"] + backlog["working"]
                signals = replace(signals, queue=float(items), backlog=items)
            decision = decide(scaler, state, signals, now)
            state, why = decision.state, decision.reason or why
        decided[role] = state.to_json()
        if state.replicas != before.replicas:
            changed = True
            what = f"{role or 'instances'}: {before.replicas} → {state.replicas}: {why}"
            record(service, _reason(before.replicas, state.replicas), what)
    Service.objects.filter(pk=service.pk).update(autoscale=decided)
    return changed


def _signals(
    instances: list[str], load: _Load, redis_client, now: float, cpu: float | None = None
) -> Signals:
    samples = _samples(instances, redis_client, now)
    figures = [s for s in samples if s is not None]
    queue = sum(s.get("waiting", 0.0) for s in figures) if figures else None
    kv = [s["kv_cache"] for s in figures if "kv_cache" in s]
    usage = [s for s in _usage(instances, redis_client, now) if s is not None]
    cores = [instance_usage.cpu_percent(s["cpu_cores"], cpu) for s in usage if "cpu_cores" in s]
    cards = [s["gpu_util"] for s in usage if "gpu_util" in s]
    return Signals(
        cpu=sum(cores) / len(cores) if cores else None,
        gpu=sum(cards) / len(cards) if cards else None,
        ready=len(instances),
        qps=load.qps,
        in_flight=sum(load.in_flight.get(name, 0) for name in instances),
        queue=queue,
        kv_cache=sum(kv) / len(kv) if kv else None,
        held=load.held,
    )


def _samples(instances: list[str], redis_client, now: float) -> list[dict | None]:
    if not instances:
        return []
    raw = redis_client.mget([engine_load.latest_key(name) for name in instances])
    samples = [engine_load.decode(value) for value in raw]
    return [s if s is not None and now - s["at"] <= engine_load.STALE else None for s in samples]


def _usage(instances: list[str], redis_client, now: float) -> list[dict | None]:
    if not instances:
        return []
    raw = redis_client.mget([instance_usage.key(name) for name in instances])
    samples = [instance_usage.decode(value) for value in raw]
    return [s if s is not None and now - s["at"] <= instance_usage.STALE else None
            for s in samples]  # fmt: skip


def _reason(before: int, after: int) -> str:
    if before == 0:
        return "ScaledFromZero"
    if after == 0:
        return "ScaledToZero"
    return "ScaledUp" if after > before else "ScaledDown"


class Autoscaler(LeasedPasses):
    """Every worker runs one; the lease makes one pass at a time happen fleet-wide."""

    def __init__(self, interval: float = INTERVAL) -> None:
        super().__init__("wharf-autoscaler", LOCK, interval, lambda: autoscale_all(client()))
