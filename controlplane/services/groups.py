"""Service groups in the database (contracts.service_groups): membership follows each
service's metadata.group, a group row exists while a live service names it, and the routing
snapshot carries each group's released members."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import IntegrityError, transaction
from rest_framework import exceptions

from contracts.routing import DEFAULT_SESSION_HEADER
from contracts.service_groups import DEFAULT_WEIGHT, GROUPING, STANDALONE, GroupMember, RoutedGroup
from contracts.spec import ServiceSpec
from controlplane.services.api.errors import SpecInvalid
from controlplane.services.choices import DesiredState
from controlplane.services.events import record
from controlplane.services.models import Service, ServiceGroup
from controlplane.workspaces.models import Workspace


class GroupTaken(exceptions.APIException):
    status_code = 409

    def __init__(self, field: str, message: str):
        detail = "A name this spec uses belongs to something else; nothing was saved."
        super().__init__({"detail": detail, "errors": {field: [message]}})


def check_group(spec: ServiceSpec, workspace: Workspace, service: Service | None = None) -> None:
    """409 naming the field when the spec's group is another workspace's, or a service's
    name; or when the service's own name is a group's (the gateway routes both by name)."""
    if service is None and ServiceGroup.objects.filter(name=spec.name).exists():
        raise GroupTaken("name", f"{spec.name!r} is a service group's name; choose another")
    wanted = spec.metadata.group
    if not wanted:
        if _traffic_state(spec):
            why = "a service in no group takes no group traffic; name one in metadata.group"
            raise SpecInvalid({"networking.traffic_state": [why]})
        return
    group = ServiceGroup.objects.filter(name=wanted).first()
    if group is not None and group.workspace_id != workspace.pk:
        raise GroupTaken("metadata.group", f"group {wanted!r} is another workspace's")
    if Service.objects.filter(name=wanted).exclude(desired_state=DesiredState.DELETED).exists():
        raise GroupTaken("metadata.group", f"{wanted!r} is a service's name; choose another")


def sync_membership(service: Service, spec: ServiceSpec) -> None:
    """Put `service` in the group its spec names (inside the caller's transaction): the
    group's first member is released into it, a later one joins standalone until released.
    Leaving a group that then has no member removes it."""
    wanted = spec.metadata.group
    current = service.group
    if (current.name if current else None) == wanted:
        _apply_traffic_state(service, spec)
        return
    if wanted:
        try:
            with transaction.atomic():
                group, created = ServiceGroup.objects.get_or_create(
                    name=wanted, defaults={"workspace": service.workspace}
                )
        except IntegrityError:  # a concurrent create of the same group won the race
            group, created = ServiceGroup.objects.get(name=wanted), False
        if group.workspace_id != service.workspace_id:
            raise GroupTaken("metadata.group", f"group {wanted!r} is another workspace's")
        first = created or not _live_members(group).exclude(pk=service.pk).exists()
        state = GROUPING if first else STANDALONE
        Service.objects.filter(pk=service.pk).update(
            group=group, traffic_state=state, group_weight=DEFAULT_WEIGHT
        )
        how = "released into it" if first else "standalone until released"
        record(service, "JoinedGroup", f"joined service group {wanted!r} ({how})")
    else:
        Service.objects.filter(pk=service.pk).update(group=None, traffic_state=STANDALONE)
    if current is not None:
        record(service, "LeftGroup", f"left service group {current.name!r}")
        drop_if_empty(current)
    service.refresh_from_db()
    _apply_traffic_state(service, spec)
    publish_on_commit()


def _traffic_state(spec: ServiceSpec) -> str | None:
    return spec.networking.traffic_state if spec.networking else None


def _apply_traffic_state(service: Service, spec: ServiceSpec) -> None:
    """The spec's networking.traffic_state, where it sets one: EAS's way to release."""
    state = _traffic_state(spec)
    if state is None or service.group is None or state == service.traffic_state:
        return
    Service.objects.filter(pk=service.pk).update(traffic_state=state)
    service.refresh_from_db()
    record(service, "Released", f"in group {service.group.name!r}: {state} "
           "(the spec's networking.traffic_state)")  # fmt: skip
    publish_on_commit()


def leave_group(service: Service) -> None:
    """A deleted service leaves its group, which goes when it has no other member."""
    group = service.group
    if group is None:
        return
    Service.objects.filter(pk=service.pk).update(group=None, traffic_state=STANDALONE)
    drop_if_empty(group)
    publish_on_commit()


def publish_on_commit() -> None:
    """The gateways learn a change of groups once it is committed."""
    from controlplane.services.routing import publish_snapshot  # it reads routed_groups

    transaction.on_commit(publish_snapshot, robust=True)


def drop_if_empty(group: ServiceGroup) -> None:
    if not _live_members(group).exists():
        group.delete()


def _live_members(group: ServiceGroup):
    return Service.objects.filter(group=group).exclude(desired_state=DesiredState.DELETED)


def routed_groups(headers: Mapping[str, str]) -> dict[str, RoutedGroup]:
    """Each group as the gateways route it: its released members that are routed (`headers`:
    each routed service's session header, by name)."""
    found = {}
    for group in ServiceGroup.objects.prefetch_related("members"):
        members = sorted(
            (m for m in group.members.all() if m.traffic_state == GROUPING and m.name in headers),
            key=lambda m: m.name,
        )
        session = [group.session_header or DEFAULT_SESSION_HEADER]
        session += [headers[m.name] for m in members]
        found[group.name] = RoutedGroup(
            name=group.name,
            mode=group.traffic_mode,
            members=tuple(GroupMember(m.name, m.group_weight) for m in members),
            session_headers=tuple(dict.fromkeys(session)),
        )
    return found
