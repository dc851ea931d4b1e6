"""A canary release's outcomes (contracts.canary), shared by the canary controller
(workers.scheduling.canaries) and the API's hand controls (controlplane.services.api.canary): each
an event of the service and an entry of the audit trail, and a routing snapshot published at
once so the gateways take the new weight."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F

from contracts import canary as canaries
from contracts.spec import SpecError, typed_spec
from controlplane.audit.models import AuditEntry
from controlplane.services.events import record
from controlplane.services.models import Canary, Instance, Service
from controlplane.services.names import NameTaken, claim_model_names
from controlplane.services.routing import publish_snapshot
from controlplane.services.sealing import unseal
from controlplane.services.versions import record_version

ACTOR = "wharf"  # the audit's actor for the controller's own decisions


def bounds(release: Canary) -> canaries.Bounds:
    return canaries.Bounds(release.max_error_rate, release.max_ttft_ratio,
                           release.max_itl_ratio, release.min_requests)  # fmt: skip


def note(release: Canary, reason: str, message: str, actor: str = ACTOR) -> None:
    """An event of the service and an entry of the audit trail."""
    service = release.service
    record(service, reason, message)
    action = f"{reason}: {message}"[:300]
    AuditEntry.objects.create(workspace=service.workspace, actor=actor[:150], via="canary",
                              action=action, service=service.name)  # fmt: skip


def finish(release: Canary, state: str, why: str, actor: str = ACTOR) -> None:
    """Roll back or abort: the canary's weight 0 at once; the scheduler drains its instances
    (no active canary) while the stable side serves on."""
    release.state, release.message = state, why
    release.save()
    reason = {canaries.ROLLED_BACK: "CanaryRolledBack", canaries.ABORTED: "CanaryAborted"}[state]
    note(release, reason, f"the previous version keeps serving: {why}", actor)
    transaction.on_commit(lambda: publish_snapshot(force=True), robust=True)


def promote(release: Canary, why: str, actor: str = ACTOR) -> None:
    """The canary's spec becomes the service's, as a new version; its instances become the
    stable ones (their spec is the service's now) and the old ones are drained."""
    service = Service.objects.select_for_update().get(pk=release.service_id)
    try:
        with transaction.atomic():  # its adapters' model ids, checked when it started
            claim_model_names(typed_spec(unseal(release.spec)), service)
    except NameTaken as taken:
        taken_by = "; ".join(words for said in taken.errors.values() for words in said)
        finish(release, canaries.ABORTED, f"its model names cannot be served: {taken_by}", actor)
        return
    except SpecError:
        pass  # a spec this version no longer reads: the service keeps the names it holds
    Service.objects.filter(pk=service.pk).update(spec=release.spec, generation=F("generation") + 1)
    service.refresh_from_db()
    record_version(service, release.spec, "canary promoted")
    Instance.objects.filter(service=service, track=canaries.CANARY_TRACK).update(track="")
    release.state, release.message = canaries.PROMOTED, why
    release.save()
    note(release, "CanaryPromoted", f"the new version serves every call: {why}", actor)
    transaction.on_commit(lambda: publish_snapshot(force=True), robust=True)
