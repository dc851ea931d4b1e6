"""The API keys REST API. Every change republishes the routing snapshot once it commits, so
a revoked key stops working at the gateways within a second (they reload on pub/sub)."""

from __future__ import annotations

import re

from django.db import transaction
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.services.routing import publish_snapshot
from controlplane.tokens.api.errors import Invalid
from controlplane.tokens.api.negotiation import FORMAT, NamedFormatNegotiation
from controlplane.tokens.api.serializers import ApiKeySerializer
from controlplane.tokens.api.validation import parse_key_request
from controlplane.tokens.api.values import MAX_INT, parameter_errors
from controlplane.tokens.models import ApiKey
from controlplane.workspaces.access import access, in_workspace
from controlplane.workspaces.roles import KEYS


def visible_keys(request: Request) -> QuerySet[ApiKey]:
    """The acting workspace's keys (staff: every key); another workspace's key is a 404, not
    a 403, so ids do not reveal which keys exist."""
    return in_workspace(request, ApiKey.objects.select_related("owner", "workspace"))


def _publish_on_commit() -> None:
    # robust: a Redis outage must not fail a request whose change is saved; publish_snapshot
    # logs it, and the next publish (any change, any reconcile pass) carries the change.
    transaction.on_commit(publish_snapshot, robust=True)


def _key(request: Request, key_id: str) -> ApiKey:
    match = re.fullmatch(r"k?([0-9]{1,10})", key_id)  # the public id "k7", or plainly 7
    if match is None or int(match[1]) > MAX_INT:  # no id a key can have
        raise NotFound("no such key")
    return get_object_or_404(visible_keys(request), pk=int(match[1]))


class KeyList(APIView):
    content_negotiation_class = NamedFormatNegotiation
    rights = {"POST": KEYS}

    def get(self, request: Request) -> Response:
        if errors := parameter_errors(request.query_params, known=(FORMAT,)):
            raise Invalid("query", errors)
        return Response(ApiKeySerializer(visible_keys(request), many=True).data)

    def post(self, request: Request) -> Response:
        with transaction.atomic():
            workspace = access(request).workspace
            fields = parse_key_request(request.data, timezone.now(), workspace)
            api_key, key = ApiKey.issue(request.user, workspace, **fields)
            _publish_on_commit()
        body = ApiKeySerializer(api_key).data
        body["key"] = key  # shown once; only its digest is kept
        return Response(body, status=status.HTTP_201_CREATED)


class KeyDetail(APIView):
    content_negotiation_class = NamedFormatNegotiation
    rights = {"DELETE": KEYS}

    def get(self, request: Request, key_id: str) -> Response:
        return Response(ApiKeySerializer(_key(request, key_id)).data)

    def delete(self, request: Request, key_id: str) -> Response:
        """Revoke: the row stays, so its usage keeps a name and its id is never reused."""
        with transaction.atomic():
            unrevoked = ApiKey.objects.filter(pk=_key(request, key_id).pk, revoked_at=None)
            if unrevoked.update(revoked_at=timezone.now()):  # revoking twice changes nothing
                _publish_on_commit()
        return Response(status=status.HTTP_204_NO_CONTENT)
