"""Workspace roles from the identity provider's groups: the operator's mapping
(WHARF_OIDC_GROUP_ROLES), what it grants a user, and how their memberships change. Pure, so
each rule is tested as a table; the sign-in backend (controlplane.sso.backend) does the I/O.

The mapping is a comma-separated list of `GROUP=WORKSPACE:ROLE` entries, e.g.
`team-ml=ml:developer,team-ml=web:viewer,admins=*:admin`, or one entry a line when group
names hold commas (LDAP DNs such as `cn=ops,dc=example`; the last `=` ends the group).
Members of GROUP get ROLE in WORKSPACE (made at sign-in if missing); `*` is every workspace
that exists at sign-in. A user in several mapped groups gets, per workspace, the highest role
any of them grants.

Memberships the mapping made are its own: at each sign-in they follow what it grants now
(changed, or removed when no group grants them any more). Memberships given by hand in Wharf
(the API, the admin, `manage.py`) are never changed or removed by a sign-in, even where the
mapping grants another role in the same workspace: an admin who wants the identity provider
to decide removes the hand-given one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controlplane.workspaces.roles import ROLES

VARIABLE = "WHARF_OIDC_GROUP_ROLES"
EVERY_WORKSPACE = "*"
# A workspace's name as the Workspace model keeps it (a slug of at most 63 characters).
WORKSPACE_NAME = re.compile(r"^[-a-zA-Z0-9_]{1,63}$")


@dataclass(frozen=True)
class GroupRole:
    """Members of `group` get `role` in `workspace` (or in every one: `*`)."""

    group: str
    workspace: str
    role: str


def parse_group_roles(text: str) -> tuple[GroupRole, ...]:
    """The mapping from its variable's text; a ValueError naming the variable and the entry
    for anything wrong, so that a bad mapping stops start-up rather than sign-in."""
    entries: list[GroupRole] = []
    seen: dict[tuple[str, str], str] = {}
    for raw in text.splitlines() if "\n" in text.strip() else text.split(","):
        if not raw.strip():
            continue
        entry = _parse_entry(raw.strip())
        key = (entry.group, entry.workspace)
        if key in seen and seen[key] != entry.role:
            raise ValueError(
                f"{VARIABLE}: group {entry.group!r} is mapped to workspace {entry.workspace!r} "
                f"twice ({seen[key]} and {entry.role}); keep one entry"
            )
        seen[key] = entry.role
        if entry not in entries:
            entries.append(entry)
    return tuple(entries)


def _parse_entry(entry: str) -> GroupRole:
    group, equals, target = entry.rpartition("=")
    workspace, colon, role = target.partition(":")
    group, workspace, role = group.strip(), workspace.strip(), role.strip()
    if not (equals and colon and group):
        raise ValueError(
            f"{VARIABLE}: {entry!r} is not GROUP=WORKSPACE:ROLE (e.g. team-ml=ml:developer)"
        )
    if workspace != EVERY_WORKSPACE and not WORKSPACE_NAME.match(workspace):
        raise ValueError(
            f"{VARIABLE}: {entry!r}: {workspace!r} is not a workspace name (letters, digits, "
            f"'-' and '_', at most 63) nor {EVERY_WORKSPACE!r} for every workspace"
        )
    if role not in ROLES:
        raise ValueError(f"{VARIABLE}: {entry!r}: role {role!r} is not one of {', '.join(ROLES)}")
    return GroupRole(group, workspace, role)


def groups_in(claims: Mapping[str, object], claim: str) -> frozenset[str]:
    """The user's groups from the claim the provider puts them in: a list of names, or one
    name; absent or of another shape: none."""
    value = claims.get(claim)
    if isinstance(value, str):
        return frozenset({value})
    if isinstance(value, list | tuple):
        return frozenset(item for item in value if isinstance(item, str))
    return frozenset()


def granted_roles(
    mapping: Iterable[GroupRole], groups: Iterable[str], workspaces: Iterable[str]
) -> dict[str, str]:
    """Workspace -> role that the mapping grants a member of `groups`, the highest where
    several entries name one workspace; `*` reaches `workspaces` (those that exist) and those
    the user's entries name, which the sign-in makes."""
    mine = [entry for entry in mapping if entry.group in set(groups)]
    named = [e.workspace for e in mine if e.workspace != EVERY_WORKSPACE]
    every = list(dict.fromkeys([*workspaces, *named]))
    granted: dict[str, str] = {}
    for entry in mine:
        targets = every if entry.workspace == EVERY_WORKSPACE else [entry.workspace]
        for workspace in targets:
            held = granted.get(workspace)
            if held is None or ROLES.index(entry.role) < ROLES.index(held):
                granted[workspace] = entry.role
    return granted


@dataclass(frozen=True)
class Held:
    """A membership the user has: its role, and whether the mapping made it."""

    role: str
    by_mapping: bool


@dataclass(frozen=True)
class MembershipChanges:
    """What a sign-in changes: memberships to add (by the mapping), roles to set, and
    workspaces to leave."""

    add: dict[str, str] = field(default_factory=dict)
    change: dict[str, str] = field(default_factory=dict)
    remove: frozenset[str] = frozenset()


def membership_changes(granted: Mapping[str, str], held: Mapping[str, Held]) -> MembershipChanges:
    """From what the mapping grants now and what the user holds: hand-given memberships are
    left alone; the mapping's own follow what it grants."""
    add = {ws: role for ws, role in granted.items() if ws not in held}
    change = {
        ws: granted[ws]
        for ws, have in held.items()
        if have.by_mapping and ws in granted and granted[ws] != have.role
    }
    remove = frozenset(ws for ws, have in held.items() if have.by_mapping and ws not in granted)
    return MembershipChanges(add, change, remove)
