"""What every instance in the fleet holds, as the placement sees it (workers.scheduling.placement's
`Held`): read under the placement lock on each pass that places, so it reads only the columns it
needs and parses each service's spec once per generation, not once per instance per pass (the
fleet simulator's burst of 500 creates: benchmarks/README.md, "Fixed since")."""

from __future__ import annotations

from contracts import spec_facts
from contracts.allocation import decode_allocation
from contracts.spec import SpecError
from controlplane.services.choices import InstanceState
from controlplane.services.models import Instance, Service
from workers.scheduling import placement

_KEPT = 4096  # services whose reservation is remembered before the table starts again

# (service id, generation) -> (name, cpu, memory_mb, disk_mb) each of its instances reserves
_reserved: dict[tuple[int, int], tuple[str, float, int, int]] = {}


def held() -> list[placement.Held]:
    """What each instance holds: its cards, and its service's CPU, memory and disk. A job's
    instance that succeeded holds nothing: its engine has ended for good."""
    rows = list(
        Instance.objects.exclude(state=InstanceState.SUCCEEDED).values_list(
            "node", "service_id", "devices"
        )
    )
    generations = dict(
        Service.objects.filter(id__in={service for _, service, _ in rows}).values_list(
            "id", "generation"
        )
    )
    missing = {sid for sid, gen in generations.items() if (sid, gen) not in _reserved}
    if len(_reserved) + len(missing) > _KEPT:
        _reserved.clear()
        missing = set(generations)
    # A service updated or deleted between these reads: its newer reservation, or none.
    loaded = {}
    for service in Service.objects.filter(id__in=missing):
        loaded[service.id] = _reserved[(service.id, service.generation)] = _reservation(service)
    out = []
    for node, sid, devices in rows:
        reserved = _reserved.get((sid, generations.get(sid, -1))) or loaded.get(sid)
        if reserved is None:  # deleted since the rows were read
            continue
        name, cpu, memory_mb, disk_mb = reserved
        kind, cards = decode_allocation(devices) if devices else ("", ())
        out.append(placement.Held(
            node=node, service=name, kind=kind, cards=tuple(cards),
            cpu=cpu, memory_mb=memory_mb, disk_mb=disk_mb,
        ))  # fmt: skip
    return out


def _reservation(service: Service) -> tuple[str, float, int, int]:
    try:
        spec = service.parsed_spec()
    except SpecError:
        return service.name, 0, 0, 0
    return (
        service.name,
        spec_facts.reserved_cpu(spec),
        spec.metadata.memory or 0,
        spec.metadata.disk_mb,
    )
