"""Mirroring in the REST API (EAS's ServiceMirror; the gateway's part is gateway.routing.mirror):

- GET    /services/<name>/mirror   where its calls are mirrored, what share, and the figures
                                   the gateways measured side by side: the service's own calls
                                   and each target's mirrored ones (?minutes=1..60, default 5);
- PUT    /services/<name>/mirror   {"targets": [service, ...], "ratio": 1-100 (percent)};
- DELETE /services/<name>/mirror   no more copies.
"""

from __future__ import annotations

import time

import redis
from django.db import transaction
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts.call_figures import MIRROR
from controlplane.services.api.groups import valid_body
from controlplane.services.api.views import live_service
from controlplane.services.choices import DesiredState
from controlplane.services.events import record
from controlplane.services.figures import read_figures
from controlplane.services.groups import publish_on_commit
from controlplane.services.models import Service

MAX_TARGETS = 4
MAX_MINUTES = 60


class MirrorChange(serializers.Serializer):
    targets = serializers.ListField(
        child=serializers.CharField(max_length=63), min_length=1, max_length=MAX_TARGETS,
        help_text="services of the same workspace that get the copies",
    )  # fmt: skip
    ratio = serializers.IntegerField(min_value=1, max_value=100, help_text="percent of calls")


class MirrorFigures(serializers.Serializer):
    minutes = serializers.IntegerField()
    service = serializers.DictField(help_text="its own calls: requests, errors, TTFT, ITL")
    targets = serializers.DictField(help_text="per target, the copies it answered")


class MirrorState(serializers.Serializer):
    targets = serializers.ListField(child=serializers.CharField())
    ratio = serializers.IntegerField()
    figures = MirrorFigures()


def _minutes(request: Request) -> int:
    raw = request.query_params.get("minutes", "5")
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_MINUTES):
        raise ValidationError({"minutes": [f"a whole number from 1 to {MAX_MINUTES}"]})
    return int(raw)


def _state(service: Service, minutes: int) -> dict:
    targets = list(service.mirror.get("targets") or [])
    since = time.time() - minutes * 60
    try:
        figures = {
            "minutes": minutes,
            "service": read_figures(service.name, "", since),
            "targets": {t: read_figures(t, MIRROR, since) for t in targets},
        }
    except redis.RedisError as exc:
        figures = {"minutes": minutes, "service": {}, "targets": {}, "unavailable": str(exc)}
    return {"targets": targets, "ratio": int(service.mirror.get("ratio") or 0),
            "figures": figures}  # fmt: skip


def set_mirror(request: Request, name: str, data: dict) -> Service:
    """Copy `data["ratio"]` % of the named service's calls to `data["targets"]` (checked by
    MirrorChange): services of its workspace, not itself; 400 naming `targets[i]` else.
    Shared with EAS's Create/UpdateServiceMirror (controlplane.eas_api.mirror)."""
    targets = list(dict.fromkeys(data["targets"]))
    with transaction.atomic():
        service = live_service(request, name)
        live = Service.objects.exclude(desired_state=DesiredState.DELETED)
        found = set(live.filter(workspace=service.workspace, name__in=targets)
                    .values_list("name", flat=True))  # fmt: skip
        for index, target in enumerate(targets):
            if target == name:
                raise ValidationError({f"targets[{index}]": ["a service cannot mirror to "
                                                             "itself"]})  # fmt: skip
            if target not in found:  # another workspace's is no more known than none
                raise ValidationError({f"targets[{index}]": [
                    f"no such service in workspace {service.workspace.name!r}"]})  # fmt: skip
        service.mirror = {"targets": targets, "ratio": data["ratio"]}
        service.save(update_fields=["mirror", "updated_at"])
        record(service, "MirrorSet", f"{data['ratio']}% of calls copied to "
               f"{', '.join(targets)}; their answers discarded")  # fmt: skip
        publish_on_commit()
    return service


def remove_mirror(request: Request, name: str) -> None:
    with transaction.atomic():
        service = live_service(request, name)
        if service.mirror:
            service.mirror = {}
            service.save(update_fields=["mirror", "updated_at"])
            record(service, "MirrorRemoved", "calls no longer copied")
            publish_on_commit()


class ServiceMirror(APIView):
    def get(self, request: Request, name: str) -> Response:
        return Response(_state(live_service(request, name), _minutes(request)))

    def put(self, request: Request, name: str) -> Response:
        service = set_mirror(request, name, valid_body(request, MirrorChange))
        return Response(_state(service, 5))

    def delete(self, request: Request, name: str) -> Response:
        remove_mirror(request, name)
        return Response(status=204)
