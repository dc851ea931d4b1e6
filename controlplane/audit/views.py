"""GET /api/v1/audit: the acting workspace's audit trail, newest first (staff: every
workspace's, and entries of none, such as the operator's commands)."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.audit.models import AuditEntry
from controlplane.tokens.api.errors import Invalid
from controlplane.tokens.api.negotiation import FORMAT, NamedFormatNegotiation
from controlplane.tokens.api.values import parameter_errors, timestamp
from controlplane.workspaces.access import in_workspace

MAX_LIMIT = 1000


def as_json(entry: AuditEntry) -> dict:
    return {"at": entry.at, "workspace": entry.workspace.name if entry.workspace else None,
            "actor": entry.actor, "via": entry.via, "action": entry.action,
            "status": entry.status, "service": entry.service or None}  # fmt: skip


class Audit(APIView):
    content_negotiation_class = NamedFormatNegotiation

    def get(self, request: Request) -> Response:
        params = request.query_params
        known = (FORMAT, "since", "until", "service", "actor", "limit")
        errors = parameter_errors(params, known=known)
        limit = params.get("limit", "100")
        if not (limit.isascii() and limit.isdigit() and 1 <= int(limit) <= MAX_LIMIT):
            errors["limit"] = [f"a whole number from 1 to {MAX_LIMIT}"]
        bounds = {}
        for name, lookup in (("since", "at__gte"), ("until", "at__lt")):
            if name in params:
                try:
                    bounds[lookup] = timestamp(params[name])
                except ValueError as exc:
                    errors[name] = [str(exc)]
        if errors:
            raise Invalid("query", errors)
        entries = in_workspace(request, AuditEntry.objects.select_related("workspace"))
        entries = entries.filter(**bounds)
        if params.get("service"):
            entries = entries.filter(service=params["service"])
        if params.get("actor"):
            entries = entries.filter(actor=params["actor"])
        return Response([as_json(entry) for entry in entries[: int(limit)]])
