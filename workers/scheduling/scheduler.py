"""The scheduler: one pass over one service, on any worker, deciding what should run where.

It reads the service's intent (spec, desired state) and its instance rows, asks the rollout
planner (workers.scheduling.rollout) what to create and what to drain, places new instances with the
placement function (workers.scheduling.placement) under a fleet-wide lock, and writes the decisions
as rows: a placed instance is a row in state `creating` on its node; one to remove is `draining`.
The nodes' agents (workers.nodes.agent) carry them out and write what they observe. The scheduler
alone writes a service's observed status (phase, progress, last_error).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import count as numbers
from itertools import islice
from typing import NamedTuple

from django.db import transaction
from django.utils import timezone

from contracts import spec_facts
from contracts.allocation import encode_allocation
from contracts.canary import ACTIVE as CANARY_ACTIVE
from contracts.canary import CANARY_TRACK
from contracts.hub_refs import is_hub_ref, parse_hub_ref
from contracts.object_store import source_from_env
from contracts.spec import ServiceSpec, SpecError, parse_spec
from contracts.spec_facts import card_need
from contracts.spec_job import is_job
from controlplane.nodes.models import Node
from controlplane.nodes.state import DRAINING as NODE_DRAINING
from controlplane.nodes.state import NOT_READY, node_state
from controlplane.services.choices import DesiredState, InstanceState
from controlplane.services.events import record, record_each, record_once
from controlplane.services.models import Instance, Service
from controlplane.services.routing import publish_for
from controlplane.services.sealing import unseal
from controlplane.tokens.models import ApiKey
from workers.fleet import FleetSettings, placement_lock, wake
from workers.models import storage
from workers.scheduling import capacity, gangs, holdings, placement, planning, rollout
from workers.scheduling.offers import offers as node_offers

log = logging.getLogger(__name__)

MOVING = 2.0  # seconds to the next pass while instances wait for cards
# ... while instances start, restart or drain: each of their transitions asks for a pass at
# once (workers.nodes.agent), so this one only makes up for an ask that was lost; at fleet
# size a burst's services polled every 2 s took the workers' every core (issue 31).
FOLLOW = 5.0


class NodeRow(NamedTuple):
    """What a pass reads of every node: whether it answers and takes anything new."""

    name: str
    heartbeat_at: datetime | None
    cordoned: bool
    draining: bool


@dataclass(frozen=True)
class Pass:
    """What one pass decided, for the status and the next pass."""

    waiting: str = ""  # why instances wait for a node
    paused: str = ""  # why a rollout waits
    woken: frozenset[str] = frozenset()


def schedule(name: str, fleet: FleetSettings, now: datetime | None = None) -> float | None:
    """One pass; seconds until the next one, or None once the service has settled."""
    now = now or timezone.now()
    service = Service.objects.filter(name=name).first()
    if service is None:
        return None
    # Every node's state (the placement reads its offers under the lock, when it places).
    listed = Node.objects.values_list(*NodeRow._fields)
    nodes = {node.name: node for node in map(NodeRow._make, listed)}
    states = {name: _node_state(node, now, fleet) for name, node in nodes.items()}
    _follow_nodes(service, states, nodes, fleet, now)
    woken: set[str] = set()
    spec, error = _spec(service)
    replicas = _replicas(service, spec)
    rows = list(service.instances.all())
    was_draining = {r.name for r in rows if r.state == InstanceState.DRAINING}
    woken |= _drain(service, gangs.half_drained(rows), now)  # a gang drains whole
    waiting, paused = "", ""
    if error is None:
        stable = [r for r in rows if r.track != CANARY_TRACK]
        placed, waiting = _drain_and_create(service, spec, replicas, stable, states, now, fleet)
        canary_placed, canary_waiting = _canary(service, spec, replicas, rows, states, now, fleet)
        woken |= placed | canary_placed
        waiting = waiting or canary_waiting
        rows = list(service.instances.all())
        paused = _paused(spec, replicas, [r for r in rows if r.track != CANARY_TRACK], states)
    else:  # an invalid stored spec: start nothing, drain everything
        woken |= _drain(service, [r for r in rows if r.state != InstanceState.DRAINING], now)
        rows = list(service.instances.all())
    stable_rows = [r for r in rows if r.track != CANARY_TRACK]
    settled = _write_status(service, spec, replicas, stable_rows, error, paused, waiting)
    if service.desired_state == DesiredState.DELETED and not rows:
        finish_deletion(service, "every instance removed; service deleted")
        return None
    # A drain waits for the gateways to serve a snapshot at least as new as itself.
    publish_for(name, force=any(r.state == InstanceState.DRAINING and r.name not in was_draining
                                for r in rows))  # fmt: skip
    wake(woken)
    if waiting:
        return MOVING
    return None if settled else FOLLOW


def _node_state(node: NodeRow, now: datetime, fleet: FleetSettings) -> str:
    grace = timedelta(seconds=fleet.node_grace)
    return node_state(node.heartbeat_at, now, grace, node.cordoned, node.draining)


def _follow_nodes(service, states, nodes, fleet: FleetSettings, now) -> None:
    """Rows on a node that stopped answering are `unknown` (out of routing); past the second
    grace they are given up, so replacements are placed elsewhere. A row on a node that never
    registered is given up at once. When the node returns, its agent removes what is no
    longer assigned to it."""
    evict_after = timedelta(seconds=fleet.node_grace + fleet.node_evict)
    evicted = {
        n.name for n in nodes.values() if n.heartbeat_at and now - n.heartbeat_at > evict_after
    }
    live = list(service.instances.exclude(state=InstanceState.SUCCEEDED))  # one read for both
    members = [row for row in live if row.gang]  # of instances across hosts: given up whole
    gangs.give_up_broken(service, members, states, nodes, evicted)
    for row in (row for row in live if not row.gang):
        node = nodes.get(row.node)
        if node is None or (node.heartbeat_at and now - node.heartbeat_at > evict_after):
            why = "is gone" if node is None else f"has been silent since {node.heartbeat_at:%X}"
            record(service, "InstanceLost", f"node {row.node} {why}; placing it elsewhere",
                   row.name)  # fmt: skip
            row.delete()
        elif states[row.node] == NOT_READY and row.state not in (
            InstanceState.UNKNOWN,
            InstanceState.DRAINING,  # a drain stays a drain
        ):
            Instance.objects.filter(pk=row.pk, state=row.state).update(state=InstanceState.UNKNOWN)
            record(service, "InstanceUnknown", f"node {row.node} stopped answering", row.name)


def _spec(service: Service) -> tuple[ServiceSpec | None, str | None]:
    if service.desired_state != DesiredState.RUNNING:
        return None, None
    try:
        return service.parsed_spec(), None
    except SpecError as exc:  # stored before a validation rule tightened: a permanent error
        return None, f"invalid spec: {exc}"


def _replicas(service: Service, spec: ServiceSpec | None) -> dict[str, int]:
    """Instances wanted per role; roles the spec no longer has want none."""
    wanted = spec_facts.replicas(spec, service.autoscale) if spec is not None else {"": 0}
    for role in service.instances.values_list("role", flat=True).distinct():
        wanted.setdefault(role, 0)
    return wanted


def _members(rows, states) -> list[rollout.Member]:
    """The rollout's view: one member per instance (the members of a gang count as one)."""
    draining = {node for node, state in states.items() if state == NODE_DRAINING}
    return gangs.as_rollout_members(rows, draining)


def _strategy(spec: ServiceSpec | None, replicas: int) -> tuple[int, int]:
    strategy = getattr(spec, "rolling_strategy", None) if spec else None
    return strategy.resolve(replicas) if strategy else (1, 0)


def _drain_and_create(service, spec, replicas, rows, states, now, fleet) -> tuple[set[str], str]:
    target = spec.spec_hash() if spec else ""
    woken: set[str] = set()
    if service.generation != service.observed_generation:
        # A new intent retries what could not start (a fixed dockerAuth, a model now in the
        # store) even when the instance's spec hash is unchanged, and runs a job again.
        failed = [r for r in rows if r.state in (InstanceState.FAILED, InstanceState.SUCCEEDED)]
        woken |= _drain(service, failed, now)
        rows = [r for r in rows if r not in failed]
    creates: list[str] = []
    for role, count in replicas.items():
        surge, unavailable = _strategy(spec, count)
        members = _members([r for r in rows if r.role == role], states)
        step = rollout.step(count, target, members, surge, unavailable)
        woken |= _drain(service, [r for r in rows if gangs.unit_of(r) in step.drain], now)
        creates += [role] * step.create
    if not creates or spec is None:
        return woken, ""
    placed, waiting = _place(service, spec, creates, target, states, fleet.pd_ports)
    return woken | placed, waiting


def _canary(service, spec, replicas, rows, states, now, fleet) -> tuple[set[str], str]:
    """A canary release's instances (contracts.canary): as many per role as the stable side
    wants, of the canary's spec, beside the stable ones; without an active canary (rolled
    back, aborted) its instances are drained."""
    mine = [r for r in rows if r.track == CANARY_TRACK]
    release = service.canaries.filter(state__in=CANARY_ACTIVE).first() if spec else None
    canary_spec = _canary_spec(release)
    if canary_spec is None or release is None:
        return _drain(service, [r for r in mine if r.state != InstanceState.DRAINING], now), ""
    woken: set[str] = set()
    creates: list[str] = []
    for role, count in replicas.items():
        surge, unavailable = _strategy(canary_spec, count)
        members = _members([r for r in mine if r.role == role], states)
        step = rollout.step(count, release.spec_hash, members, surge, unavailable)
        woken |= _drain(service, [r for r in mine if gangs.unit_of(r) in step.drain], now)
        creates += [role] * step.create
    if not creates:
        return woken, ""
    placed, waiting = _place(service, canary_spec, creates, release.spec_hash, states,
                             fleet.pd_ports, CANARY_TRACK)  # fmt: skip
    return woken | placed, waiting


def _canary_spec(release) -> ServiceSpec | None:
    if release is None:
        return None
    try:
        return parse_spec(unseal(release.spec))
    except SpecError:
        return None


def _drain(service: Service, rows: list[Instance], now) -> set[str]:
    """Out of routing now; the node's agent stops each once its requests are done."""
    for row in rows:
        Instance.objects.filter(pk=row.pk).update(state=InstanceState.DRAINING, draining_since=now)
        record(service, "InstanceDraining", "out of routing; stopping once its requests finish",
               row.name)  # fmt: skip
    return {row.node for row in rows}


def _place(
    service, spec, roles: list[str], target: str, states, pd_ports, track: str = ""
) -> tuple[set[str], str]:
    """Place one new instance per entry of `roles` and record each as a row; those that fit
    nowhere wait, with what each node lacks (returned, and an event). A prefill or decode
    instance also gets its two ports on its node (`pd_ports`: the range they come from).

    Only what placement changes is read under the fleet-wide lock (what every instance holds,
    as far as it changed since this worker's last pass: workers.scheduling.capacity); the
    nodes' offers and the service's own numbering are read before it, and the rows and
    events are written in one insert each, so a burst's passes hold the lock briefly."""
    needs = [_need(service.name, spec, role) for role in roles]
    offers = node_offers(states)
    if spec.unit_size() > 1:  # an instance across hosts: a gang, placed whole
        with placement_lock(), transaction.atomic():
            return gangs.place(
                service, spec, roles, needs, offers, holdings.held(), target, track,
                lambda node, count: _node_ports(node, pd_ports, count),
                lambda role: _free_indexes(service, [role])[role][0],
            )  # fmt: skip
    indexes = _free_indexes(service, roles)
    # The rows in one commit, made before the lock is given back: the next placer sees them.
    with placement_lock(), transaction.atomic():
        results = placement.place_on(needs, capacity.states(offers), until_unplaced=True)
        rows: list[Instance] = []
        events: list[tuple[str, str, str]] = []
        waiting = ""
        for role, result in zip(roles, results, strict=False):  # results stop at an unplaced
            if isinstance(result, placement.Unplaced):
                waiting = result.message()
                break
            port = kv_port = None
            if role:
                ports = _node_ports(result.node, pd_ports, taken=rows)
                if ports is None:
                    waiting = f"{result.node}: no free port in WHARF_PD_PORTS"
                    break
                port, kv_port = ports
            kind, _ = card_need(spec, role)
            rows.append(Instance(
                service=service, name=result.key, role=role, pd_index=indexes[role].pop(0),
                runtime="", node=result.node, spec_hash=target, state=InstanceState.CREATING,
                track=track,
                devices=encode_allocation(kind, result.cards) if result.cards else "",
                port=port, kv_port=kv_port,
            ))  # fmt: skip
            where = f"{result.node}" + (f" ({kind}:{','.join(map(str, result.cards))})"
                                        if result.cards else "")  # fmt: skip
            events.append(("InstanceCreated", f"placed on node {where}", result.key))
        Instance.objects.bulk_create(rows)
        record_each(service, events)
        if waiting:
            record_once(service, "InsufficientResources", f"no node fits: {waiting}")
    return {row.node for row in rows}, waiting


def _node_ports(
    node: str, pd_ports: tuple[int, int], count: int = 2, taken: Sequence[Instance] = ()
) -> tuple[int, ...] | None:
    """Ports no instance on `node` holds (nor one of `taken`, placed but not yet written):
    where an instance serves and its KV side channel (or a gang's rendezvous port first)."""
    held = set(gangs.held_ports(node)) | {
        port for row in taken if row.node == node for port in (row.port, row.kv_port) if port
    }
    return placement.free_ports(held, count, *pd_ports)


def _free_indexes(service: Service, roles: list[str]) -> dict[str, list[int]]:
    """For each role, the lowest numbers no row of the role holds (rank tables, engine ids),
    as many as `roles` places of it."""
    taken: dict[str, set[int]] = {role: set() for role in roles}
    for role, index in service.instances.filter(role__in=taken, rank=0).values_list(
        "role", "pd_index"
    ):
        taken[role].add(index)
    wanted = Counter(roles)
    return {
        role: list(islice((i for i in numbers() if i not in used), wanted[role]))
        for role, used in taken.items()
    }


def _need(service: str, spec: ServiceSpec, role: str) -> placement.Need:
    kind, count = card_need(spec, role)
    resource = getattr(spec.metadata, "resource", None)
    return placement.Need(
        key=planning.instance_name(service, role), service=service,
        kind=kind if count else "", cards=count, cpu=spec_facts.reserved_cpu(spec),
        memory_mb=spec.metadata.memory or 0, disk_mb=spec.metadata.disk_mb,
        selector={"resource": resource} if resource else {},
        model=_model_key(spec), spread=spec_facts.spread_policy(spec),
    )  # fmt: skip


def _model_key(spec: ServiceSpec) -> str:
    """How a node's inventory names the spec's model: its model-store name, the cache key
    of its object-storage source, or its hub repository (hf://org/name)."""
    model = (spec.llm.model or "") if spec.llm else ""
    if "://" not in model:
        return model
    if is_hub_ref(model):
        return parse_hub_ref(model).name
    try:
        return storage.cache_key(source_from_env(model))
    except Exception:  # an odd URI: no preference, staging reports it
        return ""


def _paused(spec, replicas, rows, states) -> str:
    if spec is None:
        return ""
    target = spec.spec_hash()
    for role, count in replicas.items():
        surge, unavailable = _strategy(spec, count)
        members = _members([r for r in rows if r.role == role], states)
        step = rollout.step(count, target, members, surge, unavailable)
        if step.paused:
            return step.paused
    return ""


def _first_start(row: Instance, target: str) -> bool:
    """A new instance of the current spec on its way up (a scale-up), not one restarting."""
    starting = row.state in (InstanceState.CREATING, InstanceState.STARTING)
    return starting and row.spec_hash == target and not row.restarts and not row.ready_since


def finish_deletion(service: Service, message: str) -> None:
    """The service's rows go once nothing of it runs: its keys forget it, the gateways too."""
    record(service, "Deleted", message)
    with transaction.atomic():
        ApiKey.objects.forget_service(service.name)
        service.delete()
    publish_for(service.name)


def save_status(service: Service, status: planning.Status, ready: int, last_error: str) -> bool:
    """Write the observed status unless the intent changed since `service` was read (its
    generation), with an event for a new phase; whether it was written. In a transaction."""
    updated = Service.objects.filter(pk=service.pk, generation=service.generation).update(
        phase=status.phase, progress=status.progress[:200], ready_instances=ready,
        observed_generation=service.generation, last_error=last_error,
    )  # fmt: skip
    if updated and status.phase != service.phase:
        record(service, status.phase.capitalize(), status.progress)
    return bool(updated)


def _write_status(service, spec, replicas, rows, error, paused, waiting) -> bool:
    """Write the observed status if the intent has not changed meanwhile; True when settled."""
    if is_job(spec):
        return _write_job_status(service, spec, replicas, rows, waiting)
    target = spec.spec_hash() if spec else ""
    rows = [r for r in rows if r.rank == 0]  # a gang's leader stands for it
    live = [r for r in rows if r.state != InstanceState.DRAINING]
    ready = Counter(
        r.role for r in live if r.state == InstanceState.READY and r.spec_hash == target
    )
    previous = sum(1 for r in live if r.state == InstanceState.READY and r.spec_hash != target)
    failed = [r for r in live if r.state == InstanceState.FAILED and r.spec_hash == target]
    error = error or (f"{failed[0].name}: {failed[0].message}" if failed else None)
    backoff = [r for r in live if r.state == InstanceState.BACKOFF]
    notes = [f"{r.name} {r.message.splitlines()[0] if r.message else 'restarting'}"
             for r in backoff]  # fmt: skip
    notes += [
        f"{r.name}: {r.message}" for r in live if r.state == InstanceState.CREATING and r.message
    ]  # staging, starting
    status = planning.status(
        service.desired_state, replicas, dict(ready), len(rows), service.phase,
        failed=bool(error), waiting=f"no node fits: {waiting}" if waiting else None,
        updating=any(r.spec_hash != target for r in live) or bool(paused), paused=paused,
        notes=notes, previous=previous, starting=sum(1 for r in live if _first_start(r, target)),
    )  # fmt: skip
    last_error = error or (f"rollout paused: {paused}" if paused else "") or (
        f"no node fits: {waiting}" if waiting else "")  # fmt: skip
    with transaction.atomic():
        updated = save_status(service, status, sum(ready.values()), last_error)
        if updated and paused and "rollout paused" not in service.progress:  # once a pause
            record(service, "RolloutPaused", f"the new version does not start ({paused}); "
                   "the old instances keep serving; roll back or update the spec")  # fmt: skip
    if error and error != service.last_error:
        log.warning("service %s failed: %s", service.name, error)
    moving = any(r.state not in (InstanceState.READY, InstanceState.FAILED) for r in rows)
    return not moving and status.phase in ("running", "stopped", "failed", "pending")


def _write_job_status(service, spec, replicas, rows, waiting) -> bool:
    """A job's status (workers.scheduling.planning.job_status); True when settled: nothing is being
    created or drained, and its running instances' ends wake the scheduler (the agent's
    changes do)."""
    target = spec.spec_hash()
    live = [r for r in rows if r.state != InstanceState.DRAINING and r.spec_hash == target]
    failed = [r for r in live if r.state == InstanceState.FAILED]
    notes = [f"{r.name} {r.message.splitlines()[0] if r.message else 'restarting'}"
             for r in live if r.state == InstanceState.BACKOFF]  # fmt: skip
    status = planning.job_status(
        sum(replicas.values()),
        succeeded=sum(1 for r in live if r.state == InstanceState.SUCCEEDED),
        running=sum(1 for r in live if r.state == InstanceState.STARTING),
        failed=bool(failed), waiting=f"no node fits: {waiting}" if waiting else None,
        notes=notes,
    )  # fmt: skip
    error = f"{failed[0].name}: {failed[0].message}" if failed else ""
    last_error = error or (f"no node fits: {waiting}" if waiting else "")
    with transaction.atomic():
        save_status(service, status, 0, last_error)
    moving = len(live) != len(rows) or any(r.state == InstanceState.CREATING for r in rows)
    return not moving and status.phase in ("running", "completed", "failed")
