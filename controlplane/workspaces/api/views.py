"""/api/v1/workspaces and /api/v1/workspaces/<ws>/members: who may do what where.

Staff create workspaces (platform engineers give each team one); a workspace's admins add,
change and remove its members, and only its owners make or unmake owners. A workspace keeps
at least one owner, and is deleted only once it has no services.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import IntegrityError, transaction
from rest_framework import status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.tokens.api.errors import Invalid
from controlplane.workspaces import roles
from controlplane.workspaces.access import access_to, workspaces_of
from controlplane.workspaces.models import Membership, Workspace
from controlplane.workspaces.quota_checks import held_by, queued_in, queued_quota
from controlplane.workspaces.quotas import CARD_KINDS, MAX_QUOTA, Quotas

MAX_NAME = 63  # Workspace.name
QUEUED = "queued_items"


def _workspace_json(workspace: Workspace, role: str | None, detail: bool = False) -> dict:
    body = {"name": workspace.name, "role": role, "created_at": workspace.created_at,
            "members": workspace.members.count()}  # fmt: skip
    if detail:
        used = held_by(workspace)
        queued = queued_in(workspace)
        body["quotas"] = _quotas_json(workspace.own_quotas())
        body["ceilings"] = _quotas_json(workspace.ceilings())
        body["limits"] = _quotas_json(workspace.quotas())  # what is enforced: the lower
        body["limits"]["queued_items"] = queued_quota(workspace)  # or the platform's default
        body["used"] = {"services": used.services, "instances": used.instances,
                        "cards": dict(used.cards), "queued_items": queued}  # fmt: skip
    return body


def _quotas_json(quotas: Quotas) -> dict:
    return {"services": quotas.services, "instances": quotas.instances, "cards": quotas.cards,
            "queued_items": quotas.queued_items}  # fmt: skip


def _member_json(membership: Membership) -> dict[str, Any]:
    return {"user": membership.user.get_username(), "role": membership.role,
            "since": membership.created_at}  # fmt: skip


def _fields(data: Any, allowed: set[str], required: set[str]) -> dict[str, list[str]]:
    if not isinstance(data, dict):
        return {"body": ["expected a JSON object"]}
    errors = {str(name)[:100]: ["unknown field"] for name in sorted(set(data) - allowed, key=str)}
    errors.update({name: ["required"] for name in sorted(required - set(data))})
    return errors


def _role(data: dict, errors: dict[str, list[str]]) -> str | None:
    role = data.get("role")
    if "role" in data and role not in roles.ROLES:
        errors["role"] = [f"one of {', '.join(roles.ROLES)}"]
        return None
    return role


class WorkspaceList(APIView):
    rights = None  # no acting workspace needed: this is how a user finds theirs

    def get(self, request: Request) -> Response:
        mine = dict(Membership.objects.filter(user=request.user)
                    .values_list("workspace_id", "role"))  # fmt: skip
        found = workspaces_of(request.user).prefetch_related("members")
        return Response([_workspace_json(w, mine.get(w.pk)) for w in found])

    def post(self, request: Request) -> Response:
        if not request.user.is_staff:
            raise PermissionDenied("Only staff create workspaces; ask your platform team.")
        errors = _fields(request.data, {"name"}, {"name"})
        name = request.data.get("name") if isinstance(request.data, dict) else None
        if "name" not in errors and "body" not in errors:
            try:
                if not isinstance(name, str) or len(name) > MAX_NAME:
                    raise ValidationError("bad")
                validate_slug(name)
            except ValidationError:
                errors["name"] = [f"1 to {MAX_NAME} letters, digits, - and _"]
        if errors:
            raise Invalid("workspace", errors, "; nothing was saved")
        try:
            with transaction.atomic():
                workspace = Workspace.objects.create(name=name)
                Membership.objects.create(workspace=workspace, user=request.user, role=roles.OWNER)
        except IntegrityError:
            return Response({"detail": f"A workspace named {name!r} exists.",
                             "errors": {"name": ["already exists"]}}, status=409)  # fmt: skip
        return Response(_workspace_json(workspace, roles.OWNER), status=status.HTTP_201_CREATED)


class WorkspaceDetail(APIView):
    rights = None  # checked against the workspace in the URL

    def get(self, request: Request, workspace: str) -> Response:
        acting = access_to(request, workspace)
        return Response(_workspace_json(acting.workspace, acting.role, detail=True))

    def patch(self, request: Request, workspace: str) -> Response:
        """{"quotas": {"services": n, "instances": n, "cards": {"gpu": n, "npu": n},
        "queued_items": n}} (admins)
        and {"ceilings": {...}} (staff): each given one set (null: none); those not given
        kept. A quota may not pass its ceiling: admins divide what staff allot. Running
        services are not stopped by a lower quota: it refuses what would grow past it."""
        acting = access_to(request, workspace)
        acting.require(roles.MANAGE)
        errors = _fields(request.data, {"quotas", "ceilings"}, set())
        if not errors and not request.data:
            errors["quotas"] = ["give quotas (admins) or ceilings (staff)"]
        if not errors and "ceilings" in request.data and not acting.staff:
            raise PermissionDenied("Only staff set a workspace's ceilings; its admins divide "
                                   "what is below them with quotas.")  # fmt: skip
        parts = [part for part in ("quotas", "ceilings") if not errors and part in request.data]
        changes = {part: parse_quotas(request.data[part], errors, part) for part in parts}
        if errors:
            raise Invalid("workspace", errors, "; nothing was saved")
        with transaction.atomic():
            found = Workspace.objects.select_for_update().get(pk=acting.workspace.pk)
            for part, prefix in (("ceilings", "ceiling"), ("quotas", "quota")):
                _apply(found, prefix, changes.get(part, {}))
            above = found.own_quotas().above(found.ceilings()) if "quotas" in changes else {}
            if above:
                raise Invalid("workspace", above, "; nothing was saved")
            found.save()
        return Response(_workspace_json(found, acting.role, detail=True))

    def delete(self, request: Request, workspace: str) -> Response:
        acting = access_to(request, workspace)
        acting.require(roles.OWN)
        with transaction.atomic():
            found = Workspace.objects.select_for_update().get(pk=acting.workspace.pk)
            if found.services.exists():
                return Response({"detail": f"Workspace {workspace!r} still has services; "
                                 "delete them first."}, status=409)  # fmt: skip
            found.delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemberList(APIView):
    rights = None

    def get(self, request: Request, workspace: str) -> Response:
        acting = access_to(request, workspace)
        members = acting.workspace.members.select_related("user")
        return Response([_member_json(m) for m in members])

    def post(self, request: Request, workspace: str) -> Response:
        acting = access_to(request, workspace)
        acting.require(roles.MANAGE)
        errors = _fields(request.data, {"user", "role"}, {"user", "role"})
        role = _role(request.data, errors) if not errors else None
        user = None
        if not errors:
            username = request.data["user"]
            user = get_user_model().objects.filter(username=username).first() if isinstance(
                username, str) else None  # fmt: skip
            if user is None:
                errors["user"] = ["no such user"]
        if errors:
            raise Invalid("member", errors, "; nothing was saved")
        _may_assign(acting, None, role)
        try:
            with transaction.atomic():
                membership = Membership.objects.create(
                    workspace=acting.workspace, user=user, role=role
                )
        except IntegrityError:
            return Response({"detail": f"{user.get_username()} is a member already; change "
                             "their role with PATCH.", "errors": {"user": ["already a member"]}},
                            status=409)  # fmt: skip
        return Response(_member_json(membership), status=status.HTTP_201_CREATED)


class MemberDetail(APIView):
    rights = None

    def _membership(self, acting, user: str) -> Membership:
        found = acting.workspace.members.select_related("user").filter(user__username=user)
        membership = found.first()
        if membership is None:
            raise NotFound(f"{user!r} is not a member of workspace {acting.workspace.name!r}")
        return membership

    def get(self, request: Request, workspace: str, user: str) -> Response:
        return Response(_member_json(self._membership(access_to(request, workspace), user)))

    def patch(self, request: Request, workspace: str, user: str) -> Response:
        acting = access_to(request, workspace)
        acting.require(roles.MANAGE)
        errors = _fields(request.data, {"role"}, {"role"})
        role = _role(request.data, errors) if not errors else None
        if errors:
            raise Invalid("member", errors, "; nothing was saved")
        with transaction.atomic():
            membership = self._membership(acting, user)
            _may_assign(acting, membership.role, role)
            _keep_an_owner(acting.workspace, membership, role)
            membership.role = role
            membership.save(update_fields=["role"])
        return Response(_member_json(membership))

    def delete(self, request: Request, workspace: str, user: str) -> Response:
        acting = access_to(request, workspace)
        acting.require(roles.MANAGE)
        with transaction.atomic():
            membership = self._membership(acting, user)
            _may_assign(acting, membership.role, None)
            _keep_an_owner(acting.workspace, membership, None)
            membership.delete()  # their tokens for this workspace stop working: no membership
        return Response(status=status.HTTP_204_NO_CONTENT)


def _may_assign(acting, before: str | None, after: str | None) -> None:
    if not acting.staff and not roles.may_assign(acting.role, before, after):
        raise PermissionDenied(roles.refusal(acting.role, roles.OWN, acting.workspace.name))


def _keep_an_owner(workspace: Workspace, membership: Membership, after: str | None) -> None:
    """A workspace never loses its last owner (it could then never be managed again)."""
    if membership.role != roles.OWNER or after == roles.OWNER:
        return
    owners = Membership.objects.select_for_update().filter(workspace=workspace, role=roles.OWNER)
    if owners.count() <= 1:
        last = f"{membership.user.get_username()} is the last owner of this workspace"
        raise Invalid("member", {"role": [f"{last}; make another owner first"]})


def _apply(found: Workspace, prefix: str, changes: dict[str, Any]) -> None:
    """Set `changes` (parse_quotas') on the quota_* or ceiling_* fields of `found`."""
    for name, value in changes.items():
        if name == "cards":
            cards = {**getattr(found, f"{prefix}_cards"), **value}
            setattr(found, f"{prefix}_cards", {k: v for k, v in cards.items() if v is not None})
        else:
            setattr(found, f"{prefix}_{name}", value)


def parse_quotas(value: Any, errors: dict[str, list[str]], part: str = "quotas") -> dict[str, Any]:
    """The quotas (or ceilings) a PATCH sets, each a whole number from 0 or null; errors by
    field path."""
    if not isinstance(value, dict):
        errors[part] = ["an object: services, instances, cards, queued_items"]
        return {}
    found: dict[str, Any] = {}
    for name in sorted(set(value) - {"services", "instances", "cards", QUEUED}, key=str):
        errors[f"{part}.{str(name)[:50]}"] = [
            "unknown quota; services, instances, cards or queued_items"
        ]
    for name in ("services", "instances", QUEUED):
        if name in value:
            found[name] = _quota(value[name], f"{part}.{name}", errors)
    if "cards" in value:
        cards = value["cards"]
        if not isinstance(cards, dict):
            errors[f"{part}.cards"] = [f"an object: card kind ({', '.join(CARD_KINDS)}) -> quota"]
            return found
        found["cards"] = {}
        for kind, quota in cards.items():
            if kind not in CARD_KINDS:
                errors[f"{part}.cards.{str(kind)[:50]}"] = [f"one of {', '.join(CARD_KINDS)}"]
            else:
                found["cards"][kind] = _quota(quota, f"{part}.cards.{kind}", errors)
    return found


def _quota(value: Any, path: str, errors: dict[str, list[str]]) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= MAX_QUOTA:
        errors[path] = [f"a whole number from 0 to {MAX_QUOTA}, or null for none"]
        return None
    return value
