"""Access key pairs over the REST API (/api/v1/access-keys), each user's own, in the acting
workspace: the secret is in the create answer only. A key never acts beyond its user's role,
so any member may make one (a viewer's key reads)."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.eas_api.models import AccessKey
from controlplane.services.api.errors import SpecInvalid
from controlplane.workspaces.access import access
from controlplane.workspaces.roles import READ

FIELDS = ("name",)


class AccessKeySerializer(serializers.ModelSerializer):
    workspace = serializers.CharField(source="workspace.name", read_only=True)
    user = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = AccessKey
        fields = ["key_id", "name", "user", "workspace", "created_at", "last_used_at",
                  "revoked_at"]  # fmt: skip


def own_keys(request: Request):
    return AccessKey.objects.select_related("user", "workspace").filter(
        user=request.user, workspace=access(request).workspace
    )


class AccessKeyList(APIView):
    rights = {"GET": READ, "POST": READ}

    def get(self, request: Request) -> Response:
        return Response(AccessKeySerializer(own_keys(request), many=True).data)

    def post(self, request: Request) -> Response:
        body = request.data if isinstance(request.data, dict) else None
        if body is None:
            raise SpecInvalid({"body": ['a JSON object: {"name": "..."}']})
        if unknown := sorted(set(body) - set(FIELDS)):
            raise SpecInvalid({field: ["unknown field; an access key takes only name"]
                               for field in unknown})  # fmt: skip
        name = body.get("name", "eas")
        if not isinstance(name, str) or not 1 <= len(name) <= 100:
            raise SpecInvalid({"name": ["1 to 100 characters"]})
        key, secret = AccessKey.issue(request.user, access(request).workspace, name)
        shown = AccessKeySerializer(key).data
        shown["secret"] = secret  # shown once; stored sealed
        return Response(shown, status=status.HTTP_201_CREATED)


class AccessKeyDetail(APIView):
    rights = {"DELETE": READ}

    def delete(self, request: Request, key_id: str) -> Response:
        """Revoke: the row stays (its id is never reused); a signed call with it is refused."""
        key = own_keys(request).filter(key_id=key_id).first()
        if key is None:
            raise NotFound(f"no access key {key_id!r} of yours in this workspace")
        AccessKey.objects.filter(pk=key.pk, revoked_at=None).update(revoked_at=timezone.now())
        return Response(status=status.HTTP_204_NO_CONTENT)
