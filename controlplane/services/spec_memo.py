"""Facts read from every service's spec on hot paths (placement's reservations, the API's quota
and model-name checks on each write), kept per process by service and generation: a spec
changes only with its generation, so each read parses only the specs written since the last
one, not the fleet's or the workspace's every spec (the fleet simulator's burst of creates:
benchmarks/README.md, "Fleet at scale"). A service is its id and its creation time (an id
given again after a rolled-back insert is another service). Callers read committed rows: a
write that checks its workspace leaves out the service it writes (its generation could be
rolled back and given again)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db.models import QuerySet

from controlplane.services.models import Service

T = TypeVar("T")

KEPT = 4096  # facts remembered before the table starts again

_memo: dict[tuple, Any] = {}


def each(
    services: QuerySet[Service], derive: Callable[[Service], T], *fields: str
) -> list[tuple[tuple, T]]:
    """For each of `services`: its `fields` (read as plain values) and `derive(service)`,
    derived only for a (service, generation) this process has not seen with this `derive`.
    A service updated between the reads gets its newer fact; one deleted is left out."""
    kind = f"{derive.__module__}.{derive.__qualname__}"
    rows = list(services.values_list("id", "created_at", "generation", *fields))
    found: dict[int, T] = {}
    for sid, created, generation, *_ in rows:
        if (fact := _memo.get((kind, sid, created, generation), _UNSEEN)) is not _UNSEEN:
            found[sid] = fact
    missing = {row[0] for row in rows} - found.keys()
    if len(_memo) + len(missing) > KEPT:
        _memo.clear()
    for service in Service.objects.filter(id__in=missing):
        key = (kind, service.id, service.created_at, service.generation)
        found[service.id] = _memo[key] = derive(service)
    return [(tuple(rest), found[sid]) for sid, _, _, *rest in rows if sid in found]


_UNSEEN = object()
