"""Who acts in which workspace, with which role: from the API token (it acts in one workspace)
or, in the console, from the session (the workspace switcher's choice).

Every API view is guarded by WorkspaceRight (the REST framework's default permission): a
view names the right each method needs (`rights`, by default `read` for GET/HEAD/OPTIONS and
`write` for the rest), or `rights = None` when it touches no workspace's data. Querysets are
narrowed to the acting workspace by the helpers below, so another workspace's service is a
404 rather than a 403 that would confirm it exists. Staff act with every right everywhere
and see every workspace's data.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.http import HttpRequest
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.permissions import SAFE_METHODS, BasePermission

from controlplane.audit.actor import identify
from controlplane.workspaces import roles
from controlplane.workspaces.models import DEFAULT, Membership, Workspace

SESSION_KEY = "wharf_workspace"  # the console's chosen workspace, by name


@dataclass(frozen=True)
class Access:
    workspace: Workspace
    role: str | None  # None: staff acting in a workspace they are no member of
    staff: bool

    def can(self, right: str) -> bool:
        return self.staff or roles.can(self.role, right)

    def require(self, right: str) -> None:
        if not self.can(right):
            raise PermissionDenied(roles.refusal(self.role, right, self.workspace.name))


def access(request: HttpRequest) -> Access:
    """The request's acting workspace and role (worked out once per request)."""
    cached = getattr(request, "_wharf_access", None)
    if cached is None:
        cached = _access(request)
        # On the underlying request, where the audit middleware reads it after the view.
        getattr(request, "_request", request)._wharf_access = cached
    return cached


def _access(request) -> Access:
    user = request.user
    token = getattr(request, "auth", None)
    workspace = getattr(token, "workspace", None)  # an ApiToken acts in its workspace
    if workspace is None:
        workspace = session_workspace(request)
    membership = Membership.objects.filter(workspace=workspace, user=user).first()
    role = membership.role if membership else None
    if role is None and not user.is_staff:
        raise PermissionDenied(
            f"You are not a member of workspace {workspace.name!r}; ask one of its admins."
        )
    return Access(workspace, role, user.is_staff)


def session_workspace(request) -> Workspace:
    """The console's workspace: the session's choice if still allowed, else the user's first
    (staff: any, the default one first)."""
    allowed = workspaces_of(request.user)
    chosen = allowed.filter(name=request.session.get(SESSION_KEY)).first()
    if chosen is None:
        chosen = allowed.filter(name=DEFAULT).first() or allowed.first()
    if chosen is None and request.user.is_staff:
        with transaction.atomic():
            chosen, _ = Workspace.objects.get_or_create(name=DEFAULT)
    if chosen is None:
        raise PermissionDenied(
            "You are not a member of any workspace; ask a workspace admin to add you."
        )
    return chosen


def workspaces_of(user):
    """The workspaces a user may act in: their memberships' (staff: every one)."""
    if user.is_staff:
        return Workspace.objects.all()
    return Workspace.objects.filter(members__user=user)


class WorkspaceRight(BasePermission):
    """The default permission of every API view (see the module's docstring)."""

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        identify(request)  # for the audit trail and the events this request records
        rights = getattr(view, "rights", {})
        if rights is None:
            return True
        right = rights.get(request.method, roles.READ if request.method in SAFE_METHODS
                           else roles.WRITE)  # fmt: skip
        access(request).require(right)
        return True


def access_to(request, name: str) -> Access:
    """The caller's rights in the workspace `name` named by a URL: a 404 unless they are a
    member (staff: any workspace). A token acts in its own workspace only."""
    token_workspace = getattr(getattr(request, "auth", None), "workspace", None)
    found = Workspace.objects.filter(name=name).first()
    membership = Membership.objects.filter(workspace=found, user=request.user).first()
    staff = request.user.is_staff
    if (
        found is None
        or not (membership or staff)
        or (token_workspace is not None and token_workspace != found and not staff)
    ):
        raise NotFound(f"no workspace named {name!r}")
    found_access = Access(found, membership.role if membership else None, staff)
    # The audit trail files the change under the workspace it changed (members, quotas,
    # grants), not the one the caller's token acts in.
    getattr(request, "_request", request)._wharf_access = found_access
    return found_access


def in_workspace(request, queryset, field: str = "workspace"):
    """`queryset` narrowed to the acting workspace (staff: not narrowed)."""
    acting = access(request)
    return queryset if acting.staff else queryset.filter(**{field: acting.workspace})
