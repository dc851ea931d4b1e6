"""The fleet's free capacity for a placing pass: every node's state after what every instance
holds (placement.node_states), kept by each worker process between its passes.

Built from scratch, a pass reads every instance's row and holds each on its node: at 500 nodes
and 5,000 instances that was most of a pass (holdings.held 29 ms and node_states 22 ms of a
profiled 79 ms). Between two passes few rows change, so a worker keeps the states it built and,
under the placement lock, brings them up to date: it reads the rows added since (ids above the
highest it holds) and holds them too, once it has checked that nothing else moved: the holding
rows' count and the sum of their ids are what it kept plus what it read, and the kept services
are as many, with the same sum of generations and the same newest creation time. Anything else
(a row removed or no longer holding, a spec changed, a service gone or made again) and the
states are built again from a full read. When a node's resources or labels changed, or a node
came or went, they are built again from the kept holdings, without a read; a node that only
became ready, cordoned or draining keeps its state, with its new offer.

This relies on what writes instances: rows are inserted only by placing passes, under the
placement lock and committed before it is given back, so ids grow in the order rows appear;
a row's node and cards never change in place (the Kubernetes runtime, which writes rows
otherwise, does not place); and a row comes back to holding (a job's ended instance drained
when it runs again) only when its engine has ended. Each pass gets a copy to take from; the
kept states change only from rows read.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Count, Max, Sum

from controlplane.services.models import Service
from workers.scheduling import holdings
from workers.scheduling.placement import Held, NodeOffer, NodeState, node_states


@dataclass
class _Kept:
    held: list[Held]  # what the rows below hold, in the order read
    count: int  # how many rows held
    id_sum: int  # the sum of their ids
    top: int  # the highest of them (0: none)
    services: dict[int, holdings.Reservation]  # every held row's service
    offers: dict[str, NodeOffer]  # the offers the states were built on
    states: dict[str, NodeState]  # name -> its state after `held` (all share one `zones`)


_kept: _Kept | None = None
_lock = threading.Lock()  # the worker's threads share what is kept


def states(offers: Sequence[NodeOffer]) -> list[NodeState]:
    """Every node's free state after what every instance holds, in name order: a copy the
    calling pass may take from. Called under the placement lock, in the pass's transaction."""
    global _kept
    with _lock:
        kept, _kept = _kept, None  # a pass that raises leaves nothing half brought up to date
        kept = (_brought_up_to_date(kept, offers) if kept else None) or _read(offers)
        _kept = kept
        zones = dict(next(iter(kept.states.values())).zones) if kept.states else {}
        return [kept.states[offer.name].copy(offer, zones)
                for offer in sorted(offers, key=lambda offer: offer.name)]  # fmt: skip


def forget() -> None:
    """Build the states from a full read on the next pass."""
    global _kept
    with _lock:
        _kept = None


def _read(offers: Sequence[NodeOffer]) -> _Kept:
    rows = holdings.rows(holdings.holding())
    services = holdings.reservations(row.service for row in rows)
    held = holdings.as_held(rows, services)
    ids = [row.id for row in rows]
    return _built(held, len(ids), sum(ids), max(ids, default=0), services, offers)


def _built(held, count, id_sum, top, services, offers) -> _Kept:
    states = {state.offer.name: state for state in node_states(offers, held)}
    return _Kept(held, count, id_sum, top, services, {o.name: o for o in offers}, states)


def _brought_up_to_date(kept: _Kept, offers: Sequence[NodeOffer]) -> _Kept | None:
    """`kept` with the rows added since it was read; None when anything else changed."""
    new = holdings.rows(holdings.holding().filter(id__gt=kept.top))
    now = holdings.holding().aggregate(count=Count("id"), id_sum=Sum("id"))
    ids = [row.id for row in new]
    if (now["count"], now["id_sum"] or 0) != (kept.count + len(ids), kept.id_sum + sum(ids)):
        return None  # a row went, stopped holding, or came back
    known = Service.objects.filter(id__in=kept.services).aggregate(
        count=Count("id"), generations=Sum("generation"), newest=Max("created_at")
    )
    if (known["count"], known["generations"] or 0, known["newest"]) != _services(kept.services):
        return None  # a spec changed (generations only grow), a service went or is another
    services = kept.services | holdings.reservations(
        {row.service for row in new} - kept.services.keys()
    )
    added = holdings.as_held(new, services)
    kept.held += added
    kept.count, kept.id_sum, kept.top = now["count"], now["id_sum"] or 0, max([kept.top, *ids])
    kept.services = services
    if {o.name for o in offers} != kept.offers.keys() or any(
        offer is not kept.offers[offer.name]
        and _resources(offer) != _resources(kept.offers[offer.name])
        for offer in offers
    ):
        return _built(kept.held, kept.count, kept.id_sum, kept.top, kept.services, offers)
    for each in added:
        state = kept.states.get(each.node)
        if state is not None:  # a node that is gone holds nothing we could give out
            state.hold(each.service, each.kind, each.cards, each.cpu, each.memory_mb,
                       each.disk_mb)  # fmt: skip
    kept.offers = {offer.name: offer for offer in offers}
    return kept


def _services(services: dict[int, holdings.Reservation]) -> tuple:
    """How many, the sum of their generations and the newest's creation."""
    return (len(services), sum(fact.generation for fact in services.values()),
            max((fact.created for fact in services.values()), default=None))  # fmt: skip


def _resources(offer: NodeOffer) -> tuple:
    """An offer but for whether the node takes anything new."""
    return (offer.cards, offer.cpus, offer.memory_mb, offer.disk_mb, offer.labels, offer.models,
            offer.images)  # fmt: skip
