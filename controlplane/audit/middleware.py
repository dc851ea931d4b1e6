"""Writes an AuditEntry for every change made through the API (/api/) or the console
(/console/, the sign-in page): after the view, so the entry has the answer's status and the
actor the view identified (controlplane.audit.actor). Reads are not audited; a refused write
(403) is, as an attempt."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse

from controlplane.audit.actor import CURRENT
from controlplane.audit.models import AuditEntry

log = logging.getLogger(__name__)

AUDITED = ("/api/", "/console/")
READS = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_ACTION = 300  # AuditEntry.action


class AuditMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        reset = CURRENT.set(None)  # nothing from an earlier request on this thread
        try:
            response = self.get_response(request)
            actor = getattr(request, "wharf_actor", None)
            audited = request.method not in READS and request.path.startswith(AUDITED)
            if actor and audited and (response.status_code < 400 or response.status_code == 403):
                self._write(request, response, actor)
            return response
        finally:
            CURRENT.reset(reset)

    @staticmethod
    def _write(request: HttpRequest, response: HttpResponse, actor) -> None:
        acting = getattr(request, "_wharf_access", None)
        match = request.resolver_match
        service = match.kwargs.get("name", "") if match else ""
        data = getattr(response, "data", None)
        if (
            not service
            and request.path.rstrip("/").endswith("/services")
            and isinstance(data, dict)
        ):
            # v1's answer names it `name`; EAS's CreateService (controlplane.eas_api) `ServiceName`
            service = str(data.get("name") or data.get("ServiceName") or "")[:63]
        workspace = acting.workspace if acting else None
        deleting = request.method == "DELETE"  # only a DELETE removes a workspace
        if (
            deleting
            and workspace is not None
            and not type(workspace).objects.filter(pk=workspace.pk).exists()
        ):
            workspace = None  # the request deleted it: the entry outlives it, as SET_NULL would
        try:
            AuditEntry.objects.create(
                workspace=workspace, actor=actor.user,
                via=actor.via, action=f"{request.method} {request.path}"[:MAX_ACTION],
                status=response.status_code, service=service[:63],
            )  # fmt: skip
        except Exception:  # the change is made; a lost audit row is logged, not a 500
            log.exception("could not write the audit entry of %s %s", request.method, request.path)
