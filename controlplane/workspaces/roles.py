"""Roles in a workspace and what each may do: pure, so the table is tested as a table.

A right is a kind of act, not an endpoint: views name the right each method needs
(controlplane.workspaces.access.WorkspaceRight) and this module alone says who has it.
"""

from __future__ import annotations

OWNER, ADMIN, DEVELOPER, VIEWER = "owner", "admin", "developer", "viewer"
ROLES = (OWNER, ADMIN, DEVELOPER, VIEWER)  # most to least

READ = "read"  # see services, their instances, events, logs, versions, keys, usage, benchmarks
WRITE = "write"  # deploy, change, scale, start, stop, delete and roll back services; benchmarks
KEYS = "keys"  # create and revoke API keys
MANAGE = "manage"  # add, change and remove members below owner; set the quotas
OWN = "own"  # make and unmake owners; delete the workspace

RIGHTS: dict[str, frozenset[str]] = {
    VIEWER: frozenset({READ}),
    DEVELOPER: frozenset({READ, WRITE, KEYS}),
    ADMIN: frozenset({READ, WRITE, KEYS, MANAGE}),
    OWNER: frozenset({READ, WRITE, KEYS, MANAGE, OWN}),
}
WHAT = {
    READ: "reading",
    WRITE: "changing services",
    KEYS: "managing API keys",
    MANAGE: "managing members and quotas",
    OWN: "managing owners",
}


def can(role: str | None, right: str) -> bool:
    return role is not None and right in RIGHTS.get(role, frozenset())


def least_role_with(right: str) -> str:
    """The least role that has `right`, for a refusal's message."""
    return next(role for role in reversed(ROLES) if right in RIGHTS[role])


def may_assign(actor: str | None, before: str | None, after: str | None) -> bool:
    """Whether a member with role `actor` may change someone's role from `before` to `after`
    (None: not a member). Owners are made and unmade by owners only."""
    if OWNER in (before, after):
        return can(actor, OWN)
    return can(actor, MANAGE)


def refusal(role: str | None, right: str, workspace: str) -> str:
    needed = least_role_with(right)
    held = f"your role in workspace {workspace!r} is {role}" if role else (
        f"you are not a member of workspace {workspace!r}")  # fmt: skip
    what = WHAT[right]
    return f"{what[0].upper()}{what[1:]} needs the role {needed} or above; {held}."
