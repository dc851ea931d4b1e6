"""GET /api/v1/services/<name>/instances/<instance>/logs?tail=200: an instance's container log.

The log is read on the instance's node, by that node's worker (workers.nodes.node_logs), whichever
host serves the API; a node that does not answer within a few seconds is a 504 naming it.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from rest_framework.exceptions import ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts import node_logs
from controlplane import intents
from controlplane.services.api.views import visible_services
from controlplane.services.models import Instance

DEFAULT_TAIL = 200
MAX_TAIL = 5000  # enough to see an engine's start-up; more belongs in a log pipeline


def _tail(value: str | None) -> int:
    if value is None or value == "":
        return DEFAULT_TAIL
    try:
        tail = int(value)
    except ValueError:
        raise ParseError({"tail": [f"a whole number from 1 to {MAX_TAIL}"]}) from None
    if not 1 <= tail <= MAX_TAIL:
        raise ParseError({"tail": [f"a whole number from 1 to {MAX_TAIL}"]})
    return tail


class InstanceLogs(APIView):
    def get(self, request: Request, name: str, instance: str) -> Response:
        tail = _tail(request.query_params.get("tail"))
        # Only an instance the service owns: the name alone must not open another's log.
        found = get_object_or_404(
            Instance.objects.filter(service__in=visible_services(request)),
            service__name=name,
            name=instance,
        )
        # A pod's log is read from the cluster, by any of its workers.
        reader = node_logs.CLUSTER if found.runtime == node_logs.CLUSTER else found.node
        text = intents.instance_log(reader, found.name, tail)
        if text is None:
            who = "no worker of the cluster" if reader == node_logs.CLUSTER else f"node {reader}"
            return Response(
                {"detail": f"{who} did not answer for the log of {found.name}; "
                 "is its worker running?"}, status=504,
            )  # fmt: skip
        return Response({"instance": found.name, "tail": tail, "logs": text})
