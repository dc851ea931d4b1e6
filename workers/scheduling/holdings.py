"""What every instance in the fleet holds, as the placement sees it (workers.scheduling.placement's
`Held`): read under the placement lock on each pass that places, so it reads only the columns it
needs and parses each service's spec once per generation, not once per instance per pass (the
fleet simulator's burst of 500 creates: benchmarks/README.md, "Fixed since"). A worker keeps
what it read and reads again only what changed (workers.scheduling.capacity)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from django.db.models import QuerySet

from contracts import spec_facts
from contracts.allocation import decode_allocation
from contracts.spec import SpecError
from controlplane.services import spec_memo
from controlplane.services.choices import InstanceState
from controlplane.services.models import Instance, Service
from workers.scheduling import placement


class Row(NamedTuple):
    """An instance's columns that say what it holds."""

    id: int
    node: str
    service: int  # its service's id
    devices: str


class Reservation(NamedTuple):
    """What each instance of a service holds besides its cards, and from which service and
    spec: an id given again (a rolled-back insert, a flushed table) is another service, whose
    creation time differs."""

    created: datetime
    generation: int
    name: str
    cpu: float
    memory_mb: int
    disk_mb: int


def holding() -> QuerySet[Instance]:
    """The instances that hold resources: all but a job's that succeeded (its engine has ended
    for good)."""
    return Instance.objects.exclude(state=InstanceState.SUCCEEDED)


def rows(instances: QuerySet[Instance]) -> list[Row]:
    return [Row(*row) for row in instances.values_list("id", "node", "service_id", "devices")]


def reservations(services: Iterable[int]) -> dict[int, Reservation]:
    """Each of these services' reservation; a service updated since its instances were read
    counts its newer one, one deleted is left out."""
    found = Service.objects.filter(id__in=set(services))
    return {sid: fact for (sid,), fact in spec_memo.each(found, _reservation, "id")}


def as_held(rows: Iterable[Row], reserved: dict[int, Reservation]) -> list[placement.Held]:
    """What each row holds: its cards, and its service's CPU, memory and disk (nothing when its
    service is gone)."""
    out = []
    for _, node, sid, devices in rows:
        if sid not in reserved:
            continue
        *_, name, cpu, memory_mb, disk_mb = reserved[sid]
        kind, cards = decode_allocation(devices) if devices else ("", ())
        out.append(placement.Held(
            node=node, service=name, kind=kind, cards=tuple(cards),
            cpu=cpu, memory_mb=memory_mb, disk_mb=disk_mb,
        ))  # fmt: skip
    return out


def held() -> list[placement.Held]:
    """What each instance holds, read now in full."""
    found = rows(holding())
    return as_held(found, reservations(row.service for row in found))


def _reservation(service: Service) -> Reservation:
    try:
        spec = service.parsed_spec()
    except SpecError:
        return Reservation(service.created_at, service.generation, service.name, 0, 0, 0)
    return Reservation(
        service.created_at,
        service.generation,
        service.name,
        spec_facts.reserved_cpu(spec),
        spec.metadata.memory or 0,
        spec.metadata.disk_mb,
    )
