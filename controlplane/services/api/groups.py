"""Service groups (contracts.service_groups) in the REST API:

- GET   /groups                      the acting workspace's groups (staff: every one's);
- GET   /groups/<group>              one group: mode, members, weights, shares now;
- PATCH /groups/<group>              {"traffic_mode", "session_header", "weights": {member: w}}:
                                     applied together, in one snapshot (blue-green in one call);
- POST  /services/<name>/release     {"weight", "traffic_state"}: EAS's ReleaseService.

A group is made and removed by its members' specs (metadata.group), never here.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.shortcuts import get_object_or_404
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts.routing import DEFAULT_SESSION_HEADER
from contracts.service_groups import (
    CUSTOMIZED,
    GROUPING,
    MAX_WEIGHT,
    TRAFFIC_MODES,
    TRAFFIC_STATES,
    GroupMember,
    effective_weights,
    shares,
)
from controlplane.services.api.views import live_service
from controlplane.services.choices import DesiredState
from controlplane.services.events import record
from controlplane.services.groups import publish_on_commit
from controlplane.services.models import Service, ServiceGroup
from controlplane.workspaces.access import in_workspace


class MemberSerializer(serializers.Serializer):
    service = serializers.CharField()
    traffic_state = serializers.ChoiceField(choices=TRAFFIC_STATES)
    weight = serializers.IntegerField(min_value=0, max_value=MAX_WEIGHT)
    ready_instances = serializers.IntegerField()
    share = serializers.FloatField(help_text="of the group's traffic it takes now, 0-1")


class GroupSerializer(serializers.Serializer):
    name = serializers.CharField()
    workspace = serializers.CharField()
    traffic_mode = serializers.ChoiceField(choices=TRAFFIC_MODES)
    session_header = serializers.CharField()
    endpoints = serializers.DictField(child=serializers.CharField())
    members = MemberSerializer(many=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class GroupChange(serializers.Serializer):
    """PATCH /groups/<group>: what is given changes, together."""

    traffic_mode = serializers.ChoiceField(
        choices=TRAFFIC_MODES,
        required=False,
        help_text="default: customized when weights are given",
    )
    session_header = serializers.RegexField(r"^[A-Za-z0-9-]{1,64}$", required=False)
    weights = serializers.DictField(
        child=serializers.IntegerField(min_value=0, max_value=MAX_WEIGHT), required=False,
        help_text="member name to weight (0-1000)",
    )  # fmt: skip


class Release(serializers.Serializer):
    """POST /services/<name>/release: EAS's ReleaseService."""

    weight = serializers.IntegerField(min_value=0, max_value=MAX_WEIGHT, required=False)
    traffic_state = serializers.ChoiceField(choices=TRAFFIC_STATES, required=False)


def _members(group: ServiceGroup) -> list[Service]:
    return list(group.members.exclude(desired_state=DesiredState.DELETED).order_by("name"))


def group_json(group: ServiceGroup) -> dict:
    """A group as the API shows it: each member's state and weight, and the share of the
    group's traffic each released member takes now."""
    members = _members(group)
    released = [GroupMember(m.name, m.group_weight) for m in members if m.traffic_state == GROUPING]
    ready = {m.name: m.ready_instances for m in members}
    now = shares(effective_weights(group.traffic_mode, released, ready)) if released else {}
    gateway = settings.WHARF_GATEWAY_URL.rstrip("/")
    return {
        "name": group.name,
        "workspace": group.workspace.name,
        "traffic_mode": group.traffic_mode,
        "session_header": group.session_header or DEFAULT_SESSION_HEADER,
        "endpoints": {
            "eas": f"{gateway}/api/predict/{group.name}",
            "openai": f"{gateway}/v1",
            "model": group.name,
        },  # fmt: skip
        "members": [
            {
                "service": m.name,
                "traffic_state": m.traffic_state,
                "weight": m.group_weight,
                "ready_instances": m.ready_instances,
                "share": round(now.get(m.name, 0.0), 4),
            }
            for m in members
        ],  # fmt: skip
        "created_at": group.created_at,
        "updated_at": group.updated_at,
    }


def visible_groups(request: Request):
    """The acting workspace's groups (staff: every one's). Shared with EAS's group calls."""
    return in_workspace(request, ServiceGroup.objects.select_related("workspace"))


def valid_body(request: Request, serializer: type[serializers.Serializer]) -> dict:
    """The body, checked by `serializer`; a field it does not know is a 400 naming it."""
    return valid(request.data, serializer)


def valid(data, serializer: type[serializers.Serializer]) -> dict:
    """`data` (a body in the v1 API's names), checked by `serializer`: a field it does not
    know is a 400 naming it. Shared with EAS's group calls, which translate their names."""
    if not isinstance(data, dict):
        raise ValidationError({"detail": "the body is a JSON object"})
    unknown = sorted(set(data) - set(serializer().fields))
    if unknown:
        raise ValidationError({name: ["unknown field"] for name in unknown})
    checked = serializer(data=data)
    if not checked.is_valid():
        raise ValidationError(_paths(checked.errors))
    return dict(checked.validated_data)


def _paths(errors: dict, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested errors ({"weights": {"blue": [...]}}) as field paths ("weights.blue")."""
    flat: dict[str, list[str]] = {}
    for name, found in errors.items():
        if isinstance(found, dict):
            flat.update(_paths(found, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = [str(message) for message in found]
    return flat


def change_group(request: Request, group: str, data: dict) -> ServiceGroup:
    """Apply a checked GroupChange to the named group (a 404 unless the caller sees it):
    mode, session header and weights together, in one snapshot. Shared with EAS's
    UpdateGroup (controlplane.eas_api.groups)."""
    weights = data.get("weights", {})
    with transaction.atomic():
        found = get_object_or_404(visible_groups(request).select_for_update(), name=group)
        members = {m.name: m for m in _members(found)}
        for name in weights:
            if name not in members:
                raise ValidationError({f"weights.{name}": [f"not a member of {group!r}"]})
        found.traffic_mode = data.get("traffic_mode", CUSTOMIZED if weights else found.traffic_mode)
        found.session_header = data.get("session_header", found.session_header).lower()
        found.save()
        for name, weight in weights.items():
            Service.objects.filter(pk=members[name].pk).update(group_weight=weight)
            record(members[name], "WeightChanged",
                   f"weight in group {group!r}: {weight} ({found.traffic_mode})")  # fmt: skip
        publish_on_commit()
    return found


def release(request: Request, name: str, data: dict) -> ServiceGroup:
    """Apply a checked Release to the named service (a 404 unless the caller sees it; a 400
    naming metadata.group when it is in none); its group. Shared with EAS's ReleaseService."""
    with transaction.atomic():
        service = live_service(request, name)
        if service.group is None:
            raise ValidationError({"metadata.group": [
                f"service {name!r} is in no group: name one in its spec first"]})  # fmt: skip
        changes = {
            "group_weight": data.get("weight"),
            "traffic_state": data.get("traffic_state"),
        }
        Service.objects.filter(pk=service.pk).update(
            **{k: v for k, v in changes.items() if v is not None}
        )
        service.refresh_from_db()
        record(service, "Released", f"in group {service.group.name!r}: "
               f"{service.traffic_state}, weight {service.group_weight}")  # fmt: skip
        publish_on_commit()
    return service.group


class GroupList(APIView):
    def get(self, request: Request) -> Response:
        return Response([group_json(g) for g in visible_groups(request).order_by("name")])


class GroupDetail(APIView):
    def get(self, request: Request, group: str) -> Response:
        return Response(group_json(get_object_or_404(visible_groups(request), name=group)))

    def patch(self, request: Request, group: str) -> Response:
        return Response(group_json(change_group(request, group, valid_body(request, GroupChange))))


class ServiceRelease(APIView):
    """POST /services/<name>/release: EAS's ReleaseService, a member's weight and whether it
    takes its group's traffic (grouping) or only its own endpoint's (standalone)."""

    def post(self, request: Request, name: str) -> Response:
        data = valid_body(request, Release)
        if not data:
            raise ValidationError({"detail": "give weight, traffic_state or both"})
        return Response(group_json(release(request, name, data)))
