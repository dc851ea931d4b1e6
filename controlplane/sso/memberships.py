"""A signed-in user's memberships brought in line with what the group mapping grants now
(the rules are in controlplane.sso.mapping)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.conf import settings
from django.db import transaction

from controlplane.audit.models import AuditEntry
from controlplane.sso.mapping import Held, MembershipChanges, granted_roles, membership_changes
from controlplane.sso.models import MappedMembership
from controlplane.workspaces.models import Membership, Workspace

log = logging.getLogger(__name__)


@transaction.atomic
def apply_group_roles(user, groups: Iterable[str]) -> MembershipChanges:
    """Add, change and remove the mapping's memberships of `user`, a member of `groups` at
    the provider; hand-given ones stay as they are. Each change is in the audit trail of its
    workspace."""
    existing = Workspace.objects.values_list("name", flat=True)
    granted = granted_roles(settings.WHARF_OIDC_GROUP_ROLES, groups, existing)
    memberships = {
        m.workspace.name: m
        for m in Membership.objects.filter(user=user).select_related("workspace", "sso_mapping")
    }
    held = {name: Held(m.role, hasattr(m, "sso_mapping")) for name, m in memberships.items()}
    changes = membership_changes(granted, held)
    for name, role in changes.add.items():
        workspace, _ = Workspace.objects.get_or_create(name=name)
        added = Membership.objects.create(workspace=workspace, user=user, role=role)
        MappedMembership.objects.create(membership=added)
        _audit(user, workspace, f"member as {role}, from the provider's groups")
    for name, role in changes.change.items():
        _audit(user, memberships[name].workspace, f"role {role} (was {memberships[name].role}), "
               "from the provider's groups")  # fmt: skip
        memberships[name].role = role
        memberships[name].save(update_fields=["role"])
    for name in sorted(changes.remove):
        _audit(user, memberships[name].workspace, "left: no group of theirs grants a role")
        memberships[name].delete()
    if changes.add or changes.change or changes.remove:
        log.info(
            "sign-in of %s: workspace roles added %s, changed %s, removed %s",
            user.username, changes.add, changes.change, sorted(changes.remove),
        )  # fmt: skip
    return changes


def _audit(user, workspace: Workspace, action: str) -> None:
    AuditEntry.objects.create(
        workspace=workspace, actor=user.username[:150], via="single sign-on", action=action
    )
