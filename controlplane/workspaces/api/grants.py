"""/api/v1/workspaces/<ws>/grants: what the workspace's specs may make the shared machinery
do (contracts.grants). Its members read them, to know what they may ask for; only staff
change them, since they widen what a tenant reaches on nodes, storage and the network."""

from __future__ import annotations

from django.db import transaction
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts.grants import GrantsError, parse_grants
from controlplane.tokens.api.errors import Invalid
from controlplane.workspaces.access import access_to
from controlplane.workspaces.models import Workspace
from controlplane.workspaces.policy import wharf_claims


class WorkspaceGrants(APIView):
    rights = None  # checked against the workspace in the URL

    def get(self, request: Request, workspace: str) -> Response:
        found = access_to(request, workspace).workspace
        return Response(found.parsed_grants().model_dump())

    def put(self, request: Request, workspace: str) -> Response:
        """The whole grants object; what it leaves out is closed."""
        acting = access_to(request, workspace)
        if not acting.staff:
            raise PermissionDenied(
                "Only staff change a workspace's grants; ask your platform team."
            )
        try:
            grants = parse_grants(request.data)
        except GrantsError as exc:
            raise Invalid("grants", exc.errors, "; nothing was saved") from None
        reserved = {f"grants.pvc[{i}].claim": [f"{p.claim!r} is Wharf's own claim"]
                    for i, p in enumerate(grants.pvc) if p.claim in wharf_claims()}  # fmt: skip
        if reserved:
            raise Invalid("grants", reserved, "; nothing was saved")
        with transaction.atomic():
            Workspace.objects.filter(pk=acting.workspace.pk).update(grants=grants.model_dump())
        return Response(grants.model_dump())
