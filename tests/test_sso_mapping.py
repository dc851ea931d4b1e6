"""Single sign-on's pure rules, as tables: the group mapping (WHARF_OIDC_GROUP_ROLES), what it
grants, how memberships change at a sign-in, a new user's name, and the sign-in settings."""

from __future__ import annotations

import pytest

from controlplane.sso.backend import id_token_problem, username_for
from controlplane.sso.config import sign_in_problem
from controlplane.sso.mapping import (
    GroupRole,
    Held,
    granted_roles,
    groups_in,
    membership_changes,
    parse_group_roles,
)

PARSED = [
    ("", ()),
    (" , ", ()),
    ("team-ml=ml:developer", (GroupRole("team-ml", "ml", "developer"),)),
    (
        " team-ml = ml : developer , admins=*:admin ",
        (GroupRole("team-ml", "ml", "developer"), GroupRole("admins", "*", "admin")),
    ),
    # A group may be mapped to several workspaces; a repeated entry counts once.
    (
        "ml=ml:developer,ml=web:viewer,ml=ml:developer",
        (GroupRole("ml", "ml", "developer"), GroupRole("ml", "web", "viewer")),
    ),
    # Group names as providers spell them (Keycloak's paths, Azure's ids, '=' in a DN).
    ("/org/team ml=ml:viewer", (GroupRole("/org/team ml", "ml", "viewer"),)),
    # One entry a line: commas then belong to the group's name.
    (
        "cn=ops,dc=example=ops:owner\n\n cn=ml,dc=example=ml:viewer\n",
        (
            GroupRole("cn=ops,dc=example", "ops", "owner"),
            GroupRole("cn=ml,dc=example", "ml", "viewer"),
        ),
    ),
]


@pytest.mark.parametrize("text, expected", PARSED)
def test_parses_the_mapping(text, expected):
    assert parse_group_roles(text) == expected


REFUSED = [
    ("team-ml", "is not GROUP=WORKSPACE:ROLE"),
    ("team-ml=ml", "is not GROUP=WORKSPACE:ROLE"),
    ("=ml:developer", "is not GROUP=WORKSPACE:ROLE"),
    ("team-ml=ml:boss", "role 'boss' is not one of owner, admin, developer, viewer"),
    ("team-ml=ml:", "role '' is not one of"),
    ("team-ml=:viewer", "'' is not a workspace name"),
    ("team-ml=m l:viewer", "'m l' is not a workspace name"),
    ("team-ml=" + "w" * 64 + ":viewer", "is not a workspace name"),
    ("a=ml:viewer,a=ml:admin", "group 'a' is mapped to workspace 'ml' twice (viewer and admin)"),
]


@pytest.mark.parametrize("text, message", REFUSED)
def test_refuses_a_bad_mapping_naming_the_variable_and_the_entry(text, message):
    with pytest.raises(ValueError) as raised:
        parse_group_roles(text)
    assert str(raised.value).startswith("WHARF_OIDC_GROUP_ROLES: ")
    assert message in str(raised.value)


MAPPING = parse_group_roles("ml=ml:developer,ml=web:viewer,leads=ml:admin,admins=*:admin")
GRANTED = [
    (set(), {}),
    ({"unmapped"}, {}),
    ({"ml"}, {"ml": "developer", "web": "viewer"}),
    # The highest role any of the user's groups grants in a workspace.
    ({"ml", "leads"}, {"ml": "admin", "web": "viewer"}),
    # '*' is every workspace that exists, and those the user's entries name (made at sign-in).
    ({"admins"}, {"default": "admin", "web": "admin", "ops": "admin"}),
    ({"admins", "ml"}, {"default": "admin", "web": "admin", "ops": "admin", "ml": "admin"}),
]


@pytest.mark.parametrize("groups, expected", GRANTED)
def test_grants_the_highest_role_of_the_users_groups(groups, expected):
    assert granted_roles(MAPPING, groups, ["default", "web", "ops"]) == expected


def test_an_owner_entry_outranks_every_other():
    mapping = parse_group_roles("a=ml:owner,b=ml:viewer")
    assert granted_roles(mapping, {"b", "a"}, []) == {"ml": "owner"}


MAPPED, BY_HAND = True, False
CHANGES = [
    # granted now, held before -> add, change, remove
    ({"ml": "developer"}, {}, {"ml": "developer"}, {}, set()),
    ({"ml": "admin"}, {"ml": Held("developer", MAPPED)}, {}, {"ml": "admin"}, set()),
    ({"ml": "admin"}, {"ml": Held("admin", MAPPED)}, {}, {}, set()),
    ({}, {"ml": Held("developer", MAPPED)}, {}, {}, {"ml"}),
    # Hand-given memberships are neither changed nor removed.
    ({"ml": "admin"}, {"ml": Held("viewer", BY_HAND)}, {}, {}, set()),
    ({}, {"ml": Held("viewer", BY_HAND)}, {}, {}, set()),
    (
        {"ml": "viewer", "web": "developer"},
        {"ml": Held("owner", BY_HAND), "old": Held("admin", MAPPED), "web": Held("viewer", MAPPED)},
        {},
        {"web": "developer"},
        {"old"},
    ),
]


@pytest.mark.parametrize("granted, held, add, change, remove", CHANGES)
def test_a_sign_in_changes_only_the_mappings_own_memberships(granted, held, add, change, remove):
    changes = membership_changes(granted, held)
    assert (changes.add, changes.change, set(changes.remove)) == (add, change, remove)


GROUPS = [
    ({"groups": ["a", "b"]}, {"a", "b"}),
    ({"groups": "a"}, {"a"}),
    ({"groups": ["a", 3, None]}, {"a"}),
    ({"groups": {"a": 1}}, set()),
    ({}, set()),
]


@pytest.mark.parametrize("claims, expected", GROUPS)
def test_reads_the_groups_claim_in_the_shapes_providers_send(claims, expected):
    assert groups_in(claims, "groups") == expected


NAMES = [
    ({"sub": "s1", "preferred_username": "ada", "email": "a@x.org"}, set(), "ada"),
    ({"sub": "s1", "email": "ada.l@x.org"}, set(), "ada.l"),
    ({"sub": "abc|123"}, set(), "abc-123"),
    ({"sub": "s1", "preferred_username": "ada lovelace"}, set(), "ada-lovelace"),
    ({"sub": "s1", "preferred_username": "ada"}, {"ada", "ada-2"}, "ada-3"),
    ({"sub": "", "preferred_username": " "}, set(), "sso-user"),
]


@pytest.mark.parametrize("claims, taken, expected", NAMES)
def test_a_new_user_is_named_from_the_claims_never_taking_a_name(claims, taken, expected):
    assert username_for(claims, taken.__contains__) == expected


PROBLEMS = [
    ("", "", True, None),
    ("https://id.example.com", "wharf", True, None),
    ("https://id.example.com", "wharf", False, None),
    ("id.example.com", "wharf", True, "must be the provider's URL"),
    ("https://id.example.com", "", True, "WHARF_OIDC_CLIENT_ID is not"),
    ("", "wharf", True, "WHARF_OIDC_ISSUER is not"),
    ("", "", False, "nobody could sign in"),
]


@pytest.mark.parametrize("issuer, client, local, problem", PROBLEMS)
def test_checks_the_sign_in_settings_together(issuer, client, local, problem):
    found = sign_in_problem(issuer, client, local)
    assert (found is None) if problem is None else (problem in found)


ISSUER, CLIENT = "https://id.example.com", "wharf"
ID_TOKENS = [
    ({"iss": ISSUER, "aud": CLIENT}, None),
    ({"iss": ISSUER + "/", "aud": [CLIENT]}, None),
    ({"iss": ISSUER, "aud": [CLIENT, "other"], "azp": CLIENT}, None),
    ({"iss": "https://evil.example.com", "aud": CLIENT}, "issuer"),
    ({"aud": CLIENT}, "issuer"),
    ({"iss": ISSUER, "aud": "other"}, "not this client"),
    ({"iss": ISSUER}, "not this client"),
    ({"iss": ISSUER, "aud": [CLIENT, "other"]}, "azp"),
]


@pytest.mark.parametrize("payload, problem", ID_TOKENS)
def test_an_id_token_must_be_from_the_issuer_and_for_this_client(payload, problem):
    found = id_token_problem(payload, ISSUER, CLIENT)
    assert (found is None) if problem is None else (problem in found)
