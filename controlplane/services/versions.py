"""Every spec a service has had is kept as a numbered version (as EAS does); a rollback copies
an old one forward as a new version."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Max

from contracts.spec import parse_spec
from controlplane.services.models import Service, ServiceVersion
from controlplane.services.sealing import unseal


def record_version(service: Service, spec: dict, note: str) -> ServiceVersion:
    """The spec as the service's next version (1 for its first). Called in the transaction that
    writes the spec; the service's row is locked so concurrent writes number one after another."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("record_version must run in the transaction that writes the spec")
    list(Service.objects.select_for_update().filter(pk=service.pk).values_list("pk", flat=True))
    last = service.versions.aggregate(last=Max("number"))["last"] or 0
    return ServiceVersion.objects.create(
        service=service,
        number=last + 1,
        spec=spec,
        spec_hash=parse_spec(unseal(spec)).spec_hash(),
        note=note[:200],
    )


def current_number(service: Service) -> int | None:
    """The number of the service's current version: its latest; None before its first."""
    return service.versions.aggregate(last=Max("number"))["last"]
