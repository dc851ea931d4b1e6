"""GET /api/v1/nodes[/<name>]; POST /api/v1/nodes/<name>/cordon|uncordon|drain (staff only);
GET /api/v1/beat: which host leads beat (contracts.beat)."""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.db import transaction
from django.shortcuts import get_object_or_404
from rest_framework import status
from rest_framework.exceptions import NotFound, ParseError, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts.node_logs import CLUSTER
from controlplane import intents, paging
from controlplane.nodes.api.serializers import NodeSerializer, instances_by_node
from controlplane.nodes.models import Node
from controlplane.nodes.state import STATES
from controlplane.workspaces.access import access

log = logging.getLogger(__name__)

# What each action sets: cordon keeps the node's instances, drain gives them up too.
ACTIONS = {
    "cordon": {"cordoned": True},
    "uncordon": {"cordoned": False, "draining": False},
    "drain": {"cordoned": True, "draining": True},
}


def _seen_by(request: Request) -> dict:
    """The serializer's context: whose instances the caller sees by name (staff: all)."""
    acting = access(request)
    return {} if acting.staff else {"workspace": acting.workspace.pk}


class NodeList(APIView):
    def get(self, request: Request) -> Response:
        wanted = paging.asked(request.query_params)
        if state := request.query_params.get("state"):  # a node's state is read, not stored
            if state not in STATES:
                raise ParseError({"state": [f"one of {', '.join(STATES)}"]})
            chosen = [node for node in Node.objects.all() if node.state == state]
            page = paging.page_of_list(chosen, wanted, key=lambda node: node.name)
        else:
            page = paging.page_of_rows(Node.objects.all(), wanted)
        context = {**_seen_by(request), "instances_by_node": instances_by_node(page.items)}
        data = NodeSerializer(page.items, many=True, context=context).data
        return paging.paged(request, page, data)


class NodeDetail(APIView):
    def get(self, request: Request, name: str) -> Response:
        node = get_object_or_404(Node, name=name)
        return Response(NodeSerializer(node, context=_seen_by(request)).data)


class BeatLeader(APIView):
    def get(self, request: Request) -> Response:
        try:
            shown = intents.beat_leadership()
        except redis.RedisError as exc:
            return Response(
                {"detail": f"Redis does not answer, so which host leads beat is unknown: {exc}"},
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
            )
        return Response({**shown, "lease_s": settings.WHARF_BEAT_LEASE_S})


class NodeAction(APIView):
    rights = None  # staff only, checked below

    def post(self, request: Request, name: str, action: str) -> Response:
        if action not in ACTIONS:
            raise NotFound(f"unknown action {action!r}; use {', '.join(ACTIONS)}")
        if not request.user.is_staff:
            raise PermissionDenied("only staff may cordon, drain or uncordon a node")
        with transaction.atomic():
            node = get_object_or_404(Node, name=name)
            if node.runtime == CLUSTER:  # Wharf places nothing there: the cluster does
                return Response(
                    {"detail": f"node {name} is a Kubernetes node: its pods are placed by the "
                     f"cluster's scheduler; use `kubectl {action} {name}`"},
                    status=status.HTTP_409_CONFLICT,
                )  # fmt: skip
            Node.objects.filter(pk=node.pk).update(**ACTIONS[action])
            transaction.on_commit(_reconcile_everything, robust=True)
        log.info("node %s: %s by %s", name, action, request.user)
        node.refresh_from_db()
        return Response(NodeSerializer(node, context={}).data, status=status.HTTP_202_ACCEPTED)


def _reconcile_everything() -> None:
    """A drained node's instances go, a cordon's pending ones wait, an uncordoned node takes
    new ones: every service's next pass decides, without waiting for the periodic one."""
    intents.reconcile_every_service()
