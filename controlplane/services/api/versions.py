"""A service's versions (every spec it has had) and rollback to one of them."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F
from django.shortcuts import get_object_or_404
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.services.api.errors import SpecInvalid
from controlplane.services.api.serializers import ServiceSerializer, VersionSerializer
from controlplane.services.api.views import (
    _on_commit_reconcile,
    _validated,
    fix_token,
    live_service,
    visible_services,
)
from controlplane.services.choices import DesiredState
from controlplane.services.events import record
from controlplane.services.models import Service, ServiceVersion
from controlplane.services.names import claim_model_names
from controlplane.services.sealing import unseal
from controlplane.services.versions import current_number, record_version
from controlplane.workspaces.quota_checks import check_quotas

ROLLBACK_FIELDS = ("version",)


def _refused(detail: str, errors: dict[str, list[str]]) -> Response:
    return Response({"detail": detail, "errors": errors}, status=400)


def _range(latest: int) -> str:
    return "version 1" if latest == 1 else f"versions 1 to {latest}"


class ServiceVersions(APIView):
    """GET /services/<name>/versions: newest first, secrets masked."""

    def get(self, request: Request, name: str) -> Response:
        service = live_service(request, name)
        versions = service.versions.order_by("-number")
        context = {"current": current_number(service)}
        return Response(VersionSerializer(versions, many=True, context=context).data)


class ServiceVersionDetail(APIView):
    """GET /services/<name>/versions/<number>."""

    def get(self, request: Request, name: str, number: str) -> Response:
        service = live_service(request, name)
        latest = current_number(service)
        n = int(number) if number.isascii() and number.isdigit() else None
        if n is None or latest is None or not 1 <= n <= latest:
            has = f"it has {_range(latest)}" if latest else "it has no versions"
            raise NotFound(f"Service {name!r} has no version {number!r}; {has}.")
        version = service.versions.filter(number=n).first()
        if version is None:
            raise NotFound(f"Service {name!r} has no version {n}.")
        return Response(VersionSerializer(version, context={"current": latest}).data)


class Rollback(APIView):
    """POST /services/<name>/rollback {"version": N}: version N's spec (the stored one, secrets
    included) becomes a new version and the service's spec, like an update. Without a version,
    the one before the current one."""

    def post(self, request: Request, name: str) -> Response:
        body = request.data
        if not isinstance(body, dict):
            return _refused("The body must be a JSON object.", {"body": ['{"version": N}']})
        if unknown := sorted(set(body) - set(ROLLBACK_FIELDS)):
            return _refused(
                f"Unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}.",
                {field: ["unknown field; a rollback takes only version"] for field in unknown},
            )
        wanted = body.get("version")
        if wanted is not None and (type(wanted) is not int or wanted < 1):
            return _refused(
                "version must be a whole number of 1 or more.",
                {"version": ["a whole number of 1 or more"]},
            )
        return roll_back(request, name, wanted)


def roll_back(request: Request, name: str, wanted: int | None) -> Response:
    """Version `wanted`'s spec (None: the one before the current one) becomes the named
    service's spec and a new version. Shared by the v1 API's rollback and EAS's
    UpdateServiceVersion."""
    with transaction.atomic():
        # Locked: a concurrent update or rollback waits, so "the current version" holds.
        service = get_object_or_404(visible_services(request).select_for_update(), name=name)
        latest = current_number(service)
        if wanted is None:
            if not latest or latest < 2:
                return _refused(
                    f"Service {name!r} has no version before its current one to roll back to.",
                    {"version": ["there is no previous version"]},
                )
            wanted = latest - 1
        elif not latest or wanted > latest:
            has = f"it has {_range(latest)}" if latest else "it has no versions"
            return _refused(
                f"Service {name!r} has no version {wanted}; {has}.",
                {"version": [f"no version {wanted}; {has}"]},
            )
        elif wanted == latest:
            return _refused(
                f"Version {wanted} is the current version of {name!r}; nothing to roll back.",
                {"version": [f"version {wanted} is the current version"]},
            )
        target = ServiceVersion.objects.filter(service=service, number=wanted).first()
        if target is None:
            return _refused(
                f"Service {name!r} has no version {wanted}.",
                {"version": [f"no version {wanted}"]},
            )
        try:
            spec = _validated(unseal(target.spec), service.workspace)
        except SpecInvalid as exc:
            return _refused(
                f"Version {wanted}'s spec no longer passes validation; nothing was "
                "changed. Deploy a corrected spec with an update instead.",
                exc.errors,
            )
        running = service.desired_state == DesiredState.RUNNING
        claim_model_names(spec, service)
        check_quotas(service.workspace, spec, running, service)
        Service.objects.filter(pk=service.pk).update(
            spec=target.spec, generation=F("generation") + 1
        )  # intent only: the reconciler alone writes the phase
        service.refresh_from_db()
        version = record_version(service, target.spec, f"rollback to version {wanted}")
        record(
            service,
            "RolledBack",
            f"rolled back to version {wanted}: now version {version.number} "
            f"(generation {service.generation})",
        )
        fix_token(service, spec)  # the version's own fixed token, where it has one
        _on_commit_reconcile(name)
    return Response(ServiceSerializer(service).data)
