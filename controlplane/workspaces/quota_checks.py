"""The API's quota check: what a workspace's services hold, read from their rows, against its
quotas (controlplane.workspaces.quotas). Called inside the write's transaction: the workspace
row is locked, so two deploys at once cannot both take the last card."""

from __future__ import annotations

from rest_framework import exceptions

from contracts.spec import ServiceSpec, SpecError
from controlplane.services.choices import DesiredState, Phase
from controlplane.services.models import Service
from controlplane.workspaces.models import Workspace
from controlplane.workspaces.quotas import Footprint, excess, footprint


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
    except SpecError:  # stored before a rule tightened: it runs nothing (workers.scheduler)
        spec = None
    if running is None:  # a completed job runs nothing more: its instances hold nothing
        running = service.desired_state == DesiredState.RUNNING and service.phase != Phase.COMPLETED
    return footprint(spec, running)


def held_by(workspace: Workspace, but: Service | None = None) -> Footprint:
    """What the workspace's services (but one) hold."""
    rows = Service.objects.filter(workspace=workspace).exclude(desired_state=DesiredState.DELETED)
    total = Footprint()
    for service in rows.exclude(pk=but.pk) if but else rows:
        total += _held(service)
    return total


def check_quotas(
    workspace: Workspace, spec: ServiceSpec | None, running: bool, service: Service | None = None
) -> None:
    """Raise OverQuota if `service` (None: a new one) with `spec` (None: its own), running or
    not, would take the workspace past a quota."""
    locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
    others = held_by(locked, but=service)
    before = _held(service) if service else Footprint()
    after = footprint(spec, running) if spec else _held(service, running) if service else before
    problems = excess(locked.quotas(), others, before, after, locked.name)
    if problems:
        raise OverQuota(locked.name, problems)
