"""The API's quota check: what a workspace's services hold, read from their rows, against its
quotas (controlplane.workspaces.quotas). Called inside the write's transaction: the workspace
row is locked, so two deploys at once cannot both take the last card. A workspace with no
quota on services, instances or cards reads neither (a quota set meanwhile bounds the next
write, as one set just after this write would)."""

from __future__ import annotations

from django.conf import settings
from rest_framework import exceptions

from contracts.spec import ServiceSpec, SpecError
from controlplane.services import spec_memo
from controlplane.services.choices import DesiredState, Phase
from controlplane.services.models import Service
from controlplane.workspaces.models import Workspace
from controlplane.workspaces.quotas import (
    Footprint,
    excess,
    footprint,
    queued_excess,
    queued_limit,
)


class OverQuota(exceptions.APIException):
    """400 naming each quota: {"detail": "...", "errors": {"quotas.cards.gpu": ["..."]}}."""

    status_code = 400

    def __init__(self, workspace: str, errors: dict[str, list[str]]):
        names = ", ".join(name.removeprefix("quotas.") for name in errors)
        detail = f"Over the quota of workspace {workspace!r} ({names}); nothing was saved."
        super().__init__({"detail": detail, "errors": errors})


def _held(service: Service, running: bool | None = None) -> Footprint:
    try:
        spec = service.parsed_spec()
    except SpecError:
        # Stored before a rule tightened: it runs nothing (workers.scheduling.scheduler).
        spec = None
    if running is None:  # a completed job runs nothing more: its instances hold nothing
        running = service.desired_state == DesiredState.RUNNING and service.phase != Phase.COMPLETED
    return footprint(spec, running)


def held_by(workspace: Workspace, but: Service | None = None) -> Footprint:
    """What the workspace's services (but one) hold."""
    rows = Service.objects.filter(workspace=workspace).exclude(desired_state=DesiredState.DELETED)
    if but is not None:
        rows = rows.exclude(pk=but.pk)
    total = Footprint()
    for (state, phase), running in spec_memo.each(rows, _running, "desired_state", "phase"):
        total += running if state == DesiredState.RUNNING and phase != Phase.COMPLETED else (
            footprint(None, False))  # fmt: skip
    return total


def _running(service: Service) -> Footprint:
    """What the service holds while it runs (its spec's, kept per generation)."""
    return _held(service, running=True)


def check_quotas(
    workspace: Workspace, spec: ServiceSpec | None, running: bool, service: Service | None = None
) -> None:
    """Raise OverQuota if `service` (None: a new one) with `spec` (None: its own), running or
    not, would take the workspace past a quota."""
    if not Workspace.objects.get(pk=workspace.pk).quotas().bound_services():
        return  # nothing to pass: neither what the others hold is read nor the row locked
    locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
    others = held_by(locked, but=service)
    before = _held(service) if service else Footprint()
    after = footprint(spec, running) if spec else _held(service, running) if service else before
    problems = excess(locked.quotas(), others, before, after, locked.name)
    if problems:
        raise OverQuota(locked.name, problems)


def queued_in(workspace: Workspace | int) -> int:
    """The workspace's queued items: Async items and batch requests not yet answered
    (waiting or in work); the answers in sinks are not counted."""
    from controlplane.queues.models import QueueItem, QueueName  # noqa: PLC0415 (queues import this)

    return QueueItem.objects.filter(service__workspace=workspace, queue=QueueName.INPUT).count()


def queued_quota(workspace: Workspace) -> int | None:
    """The queued items it may have: its quota, else the platform's default; None: no bound."""
    return queued_limit(workspace.quotas(), settings.WHARF_QUEUE_MAX_ITEMS_PER_WORKSPACE or None)


def queued_over(workspace_id: int, adding: int) -> dict[str, list[str]]:
    """`quotas.queued_items` with the figures if putting `adding` items in the workspace's
    queues would pass its quota. Call it inside the write's transaction: the workspace row is
    locked, so two puts at once cannot both take the last place."""
    locked = Workspace.objects.select_for_update().get(pk=workspace_id)
    return queued_excess(queued_quota(locked), queued_in(locked), adding, locked.name)
