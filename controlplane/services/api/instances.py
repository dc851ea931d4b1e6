"""Restarting single instances: EAS's DeleteServiceInstances (eascmd `dw`), here
`DELETE /api/v1/services/<name>/instances/<instance>` and, in EAS's own form,
controlplane.eas_api. An instance deleted leaves routing at once, drains as any removed
instance does (its requests finish within the service's grace), and the scheduler places a
new one in its place, so the service keeps its count.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction
from django.utils import timezone
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts import node_logs
from controlplane.services.api.serializers import InstanceSerializer
from controlplane.services.api.views import _on_commit_reconcile, live_service
from controlplane.services.choices import InstanceState
from controlplane.services.events import record
from controlplane.services.models import Instance
from controlplane.services.routing import publish_snapshot


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT


def restart_instances(request: Request, name: str, names: Sequence[str]) -> list[Instance]:
    """Drain the named instances of service `name` (a replacement is placed for each); a 404
    naming any the service does not have, a 409 for a Kubernetes pod (the cluster keeps it)."""
    with transaction.atomic():
        service = live_service(request, name)
        rows = {r.name: r for r in service.instances.select_for_update().filter(name__in=names)}
        if missing := [n for n in names if n not in rows]:
            raise NotFound(f"service {name} has no instance {', '.join(missing)}")
        if pods := [n for n, r in rows.items() if r.runtime == node_logs.CLUSTER]:
            raise Conflict(f"{', '.join(pods)}: pods the cluster keeps; delete them there "
                           "(kubectl delete pod) and their Deployment replaces them")  # fmt: skip
        who = getattr(request.user, "username", "") or "a caller"
        for row in rows.values():
            if row.state == InstanceState.DRAINING:
                continue  # going already
            Instance.objects.filter(pk=row.pk).update(
                state=InstanceState.DRAINING, draining_since=timezone.now()
            )
            record(service, "InstanceDeleteRequested", f"deleted by {who}: it drains and a new "
                   "instance takes its place", row.name)  # fmt: skip
        transaction.on_commit(lambda: publish_snapshot(force=True), robust=True)
        _on_commit_reconcile(name)
    return list(Instance.objects.filter(pk__in=[r.pk for r in rows.values()]).order_by("name"))


class ServiceInstance(APIView):
    def delete(self, request: Request, name: str, instance: str) -> Response:
        (row,) = restart_instances(request, name, [instance])
        return Response(InstanceSerializer(row).data, status=status.HTTP_202_ACCEPTED)
