"""Making workspaces and members from the operator's commands (`make run`,
`manage.py create_api_token`); the API's own member changes are in api/members.py."""

from __future__ import annotations

from django.db import transaction

from controlplane.workspaces.models import DEFAULT, Membership, Workspace


@transaction.atomic
def ensure_member(user, workspace: str = DEFAULT, role: str | None = None) -> Workspace:
    """The workspace (created if missing) with `user` in it: with `role` if given, else as
    they are (an owner if they were not a member)."""
    found, _ = Workspace.objects.get_or_create(name=workspace)
    membership, created = Membership.objects.get_or_create(
        workspace=found, user=user, defaults={"role": role or "owner"}
    )
    if role and not created and membership.role != role:
        membership.role = role
        membership.save(update_fields=["role"])
    return found
