"""Every spec a service has had is kept as a numbered version (as EAS does); a rollback copies
an old one forward as a new version."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Max

from contracts.hub_refs import is_hub_ref
from contracts.spec import ServiceSpec, parse_spec
from contracts.spec_facts import model_refs
from controlplane.services.models import Service, ServiceVersion
from controlplane.services.sealing import unseal


def record_version(service: Service, spec: dict, note: str, new: bool = False) -> ServiceVersion:
    """The spec as the service's next version (1 for its first). Called in the transaction that
    writes the spec; the service's row is locked so concurrent writes number one after another.
    `new`: the service was created in this transaction, which no other sees yet: its first
    version, with nothing to lock, count or keep."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("record_version must run in the transaction that writes the spec")
    if not new:
        list(Service.objects.select_for_update().filter(pk=service.pk).values_list("pk", flat=True))
    last = 0 if new else service.versions.aggregate(last=Max("number"))["last"] or 0
    parsed = parse_spec(unseal(spec))
    spec_hash = parsed.spec_hash()
    return ServiceVersion.objects.create(
        service=service,
        number=last + 1,
        spec=spec,
        spec_hash=spec_hash,
        note=note[:200],
        hub_commits={} if new else _kept_commits(service, parsed, spec_hash),
    )


def _kept_commits(service: Service, spec: ServiceSpec, spec_hash: str) -> dict[str, str]:
    """The hub commits a new version keeps: of each hub model it still names, the commit its
    previous version (or, first, an earlier one of the same hash: a rollback) served, so
    that an update does not move a model to a newer commit unasked."""
    refs = {ref for _, ref in model_refs(spec) if is_hub_ref(ref)}
    if not refs:
        return {}
    previous = service.versions.order_by("-number").first()
    same = service.versions.filter(spec_hash=spec_hash).order_by("-number").first()
    kept = {**(previous.hub_commits if previous else {}), **(same.hub_commits if same else {})}
    return {ref: commit for ref, commit in kept.items() if ref in refs}


def current_number(service: Service) -> int | None:
    """The number of the service's current version: its latest; None before its first."""
    return service.versions.aggregate(last=Max("number"))["last"]
