"""What every instance in the fleet holds, as the placement sees it (workers.scheduling.placement's
`Held`): read under the placement lock on each pass that places, so it reads only the columns it
needs and parses each service's spec once per generation, not once per instance per pass (the
fleet simulator's burst of 500 creates: benchmarks/README.md, "Fixed since")."""

from __future__ import annotations

from contracts import spec_facts
from contracts.allocation import decode_allocation
from contracts.spec import SpecError
from controlplane.services import spec_memo
from controlplane.services.choices import InstanceState
from controlplane.services.models import Instance, Service
from workers.scheduling import placement


def held() -> list[placement.Held]:
    """What each instance holds: its cards, and its service's CPU, memory and disk. A job's
    instance that succeeded holds nothing: its engine has ended for good."""
    rows = list(
        Instance.objects.exclude(state=InstanceState.SUCCEEDED).values_list(
            "node", "service_id", "devices"
        )
    )
    services = Service.objects.filter(id__in={service for _, service, _ in rows})
    # A service updated since the rows were read counts its newer reservation; one deleted, none.
    reserved = {sid: fact for (sid,), fact in spec_memo.each(services, _reservation, "id")}
    out = []
    for node, sid, devices in rows:
        if sid not in reserved:
            continue
        name, cpu, memory_mb, disk_mb = reserved[sid]
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
