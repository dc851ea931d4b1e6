"""Workspaces and roles through the real REST API (the configured database): two workspaces,
four roles, what each may see and do, and the members API."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.test import APIClient

from controlplane.services.models import Service
from controlplane.services.routing import build_snapshot
from controlplane.tokens.models import digest
from controlplane.workspaces import roles
from controlplane.workspaces.models import Membership, Workspace
from tests.api_support import client_for

pytestmark = pytest.mark.django_db

ROLES = ("owner", "admin", "developer", "viewer")


def spec(name: str) -> dict:
    return {"name": name, "containers": [{"image": "busybox", "command": "true"}],
            "metadata": {"instance": 0}}  # fmt: skip


@pytest.fixture
def team() -> dict[str, APIClient]:
    """Workspace `a` with one client per role and a service `a-svc`; workspace `b` with a
    developer and a service `b-svc`; and staff."""
    clients = {role: client_for(f"a-{role}", role=role, workspace="a") for role in ROLES}
    clients["b"] = client_for("b-dev", role="developer", workspace="b")
    clients["staff"] = client_for("root", staff=True, role="viewer", workspace="b")
    for client, name in ((clients["owner"], "a-svc"), (clients["b"], "b-svc")):
        assert client.post("/api/v1/services", spec(name), format="json").status_code == 201
    return clients


# --- the table --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "rights"),
    [
        ("viewer", {"read"}),
        ("developer", {"read", "write", "keys"}),
        ("admin", {"read", "write", "keys", "manage"}),
        ("owner", {"read", "write", "keys", "manage", "own"}),
        (None, set()),
        ("root", set()),  # no such role: nothing
    ],
)
def test_what_each_role_may_do(role, rights):
    assert {r for r in ("read", "write", "keys", "manage", "own") if roles.can(role, r)} == rights


@pytest.mark.parametrize(
    ("actor", "before", "after", "allowed"),
    [
        ("admin", None, "viewer", True),
        ("admin", "viewer", "developer", True),
        ("admin", "developer", None, True),
        ("admin", None, "owner", False),  # owners are made by owners
        ("admin", "owner", "admin", False),  # and unmade by them
        ("owner", "admin", "owner", True),
        ("owner", "owner", None, True),
        ("developer", None, "viewer", False),
        ("viewer", "viewer", None, False),
    ],
)
def test_who_may_assign_which_role(actor, before, after, allowed):
    assert roles.may_assign(actor, before, after) is allowed


# --- services ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_every_role_reads_its_workspace_and_only_its_own(team, role):
    api = team[role]
    assert [s["name"] for s in api.get("/api/v1/services").json()] == ["a-svc"]
    assert api.get("/api/v1/services/a-svc").json()["workspace"] == "a"
    for path in ("", "/events", "/instances", "/versions", "/benchmarks", "/tokenizer"):
        assert api.get(f"/api/v1/services/b-svc{path}").status_code == 404, path
    assert api.get("/api/v1/services/b-svc/instances/x/logs").status_code == 404


@pytest.mark.parametrize("role", ROLES)
def test_writes_need_developer_or_above_and_never_reach_another_workspace(team, role):
    api = team[role]
    created = api.post("/api/v1/services", spec(f"new-{role}"), format="json")
    changed = api.put("/api/v1/services/a-svc", spec("a-svc"), format="json")
    stopped = api.post("/api/v1/services/a-svc/stop")
    rotated = api.post("/api/v1/services/a-svc/token")
    if role == "viewer":
        for refused in (created, changed, stopped, rotated):
            assert refused.status_code == 403
            assert refused.json()["detail"] == (
                "Changing services needs the role developer or above; your role in workspace "
                "'a' is viewer."
            )
        assert not Service.objects.filter(name="new-viewer").exists()
    else:
        assert (created.status_code, created.json()["workspace"]) == (201, "a")
        assert (changed.status_code, stopped.status_code, rotated.status_code) == (200, 202, 201)
    for method, path, body in [
        ("put", "/api/v1/services/b-svc", spec("b-svc")), ("delete", "/api/v1/services/b-svc", {}),
        ("post", "/api/v1/services/b-svc/stop", {}), ("post", "/api/v1/services/b-svc/token", {}),
        ("post", "/api/v1/services/b-svc/rollback", {}),
    ]:  # fmt: skip
        answer = getattr(api, method)(path, body, format="json")
        assert answer.status_code == (403 if role == "viewer" else 404), (method, path)
    assert Service.objects.get(name="b-svc").desired_state == "running"


def test_a_name_is_unique_across_workspaces(team):
    taken = team["developer"].post("/api/v1/services", spec("b-svc"), format="json")
    assert taken.status_code == 409 and taken.json()["errors"] == {"name": ["already exists"]}


def test_staff_see_and_act_on_every_workspace(team):
    staff = team["staff"]
    listed = {(s["name"], s["workspace"]) for s in staff.get("/api/v1/services").json()}
    assert listed == {("a-svc", "a"), ("b-svc", "b")}
    assert staff.post("/api/v1/services/a-svc/stop").status_code == 202


# --- keys and usage ---------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_keys_need_developer_or_above_and_stay_in_their_workspace(team, role):
    api = team[role]
    made = api.post("/api/v1/keys", {"name": "app", "services": ["a-svc"]}, format="json")
    if role == "viewer":
        assert made.status_code == 403
        assert "Managing API keys needs the role developer" in made.json()["detail"]
        return
    assert (made.status_code, made.json()["workspace"]) == (201, "a")
    foreign = api.post("/api/v1/keys", {"name": "x", "services": ["b-svc"]}, format="json")
    assert foreign.status_code == 400
    assert foreign.json()["errors"] == {"services": ["no such service in workspace 'a': b-svc"]}
    theirs = team["b"].post("/api/v1/keys", {"name": "b"}, format="json").json()["id"]
    assert [k["workspace"] for k in api.get("/api/v1/keys").json()] == ["a"]
    assert api.delete(f"/api/v1/keys/{theirs}").status_code == 404


def test_a_key_for_every_service_reaches_every_service_of_its_workspace_only(team):
    key = team["developer"].post("/api/v1/keys", {"name": "all"}, format="json").json()["key"]
    routed = build_snapshot().keys[digest(key)]
    assert routed.allows("a-svc", now=0) and not routed.allows("b-svc", now=0)


# --- workspaces and members -------------------------------------------------------------------


def test_each_user_lists_their_workspaces_and_staff_all(team):
    assert [(w["name"], w["role"]) for w in team["viewer"].get("/api/v1/workspaces").json()] == [
        ("a", "viewer")
    ]
    everything = [(w["name"], w["role"]) for w in team["staff"].get("/api/v1/workspaces").json()]
    assert everything == [("a", None), ("b", "viewer"), ("default", None)]


def test_only_staff_create_workspaces_and_names_are_checked(team):
    refused = team["owner"].post("/api/v1/workspaces", {"name": "c"}, format="json")
    assert refused.status_code == 403
    bad = team["staff"].post("/api/v1/workspaces", {"name": "c d", "colour": 1}, format="json")
    assert bad.status_code == 400 and set(bad.json()["errors"]) == {"name", "colour"}
    made = team["staff"].post("/api/v1/workspaces", {"name": "c"}, format="json")
    assert (made.status_code, made.json()["role"]) == (201, "owner")
    again = team["staff"].post("/api/v1/workspaces", {"name": "c"}, format="json")
    assert again.status_code == 409


def test_admins_manage_members_below_owner(team):
    get_user_model().objects.create_user("carol")
    admin = team["admin"]
    added = admin.post("/api/v1/workspaces/a/members", {"user": "carol", "role": "viewer"},
                       format="json")  # fmt: skip
    assert (added.status_code, added.json()["role"]) == (201, "viewer")
    promoted = admin.patch("/api/v1/workspaces/a/members/carol", {"role": "developer"},
                           format="json")  # fmt: skip
    assert promoted.json()["role"] == "developer"
    to_owner = admin.patch("/api/v1/workspaces/a/members/carol", {"role": "owner"},
                           format="json")  # fmt: skip
    assert to_owner.status_code == 403
    assert "needs the role owner" in to_owner.json()["detail"]
    assert admin.delete("/api/v1/workspaces/a/members/a-owner").status_code == 403
    assert admin.delete("/api/v1/workspaces/a/members/carol").status_code == 204
    unknown = admin.post("/api/v1/workspaces/a/members", {"user": "nobody", "role": "cook"},
                         format="json")  # fmt: skip
    assert unknown.status_code == 400 and set(unknown.json()["errors"]) == {"role"}
    nobody = admin.post("/api/v1/workspaces/a/members", {"user": "nobody", "role": "viewer"},
                        format="json")  # fmt: skip
    assert nobody.json()["errors"] == {"user": ["no such user"]}


def test_developers_and_viewers_read_members_but_change_none(team):
    for role in ("developer", "viewer"):
        members = team[role].get("/api/v1/workspaces/a/members").json()
        assert {m["user"]: m["role"] for m in members} == {f"a-{r}": r for r in ROLES}
        answer = team[role].patch("/api/v1/workspaces/a/members/a-viewer", {"role": "admin"},
                                  format="json")  # fmt: skip
        assert answer.status_code == 403


def test_a_workspace_keeps_its_last_owner(team):
    owner = team["owner"]
    alone = owner.patch("/api/v1/workspaces/a/members/a-owner", {"role": "admin"}, format="json")
    assert alone.status_code == 400 and "last owner" in alone.json()["errors"]["role"][0]
    assert owner.patch("/api/v1/workspaces/a/members/a-admin", {"role": "owner"},
                       format="json").status_code == 200  # fmt: skip
    assert owner.delete("/api/v1/workspaces/a/members/a-owner").status_code == 204


def test_another_workspace_is_a_404_and_a_token_acts_in_its_own_only(team):
    assert team["owner"].get("/api/v1/workspaces/b/members").status_code == 404
    # a member of both, with a token of `a`: `b` is out of that token's reach
    user = get_user_model().objects.get(username="a-owner")
    Membership.objects.create(workspace=Workspace.objects.get(name="b"), user=user, role="owner")
    assert team["owner"].get("/api/v1/workspaces/b").status_code == 404
    assert team["owner"].get("/api/v1/workspaces/a").json()["role"] == "owner"


def test_a_removed_members_token_stops_working(team):
    assert team["admin"].delete("/api/v1/workspaces/a/members/a-developer").status_code == 204
    refused = team["developer"].get("/api/v1/services")
    assert refused.status_code == 403
    assert "not a member of workspace 'a'" in refused.json()["detail"]


def test_a_workspace_with_services_is_not_deleted(team):
    assert team["admin"].delete("/api/v1/workspaces/a").status_code == 403
    assert team["owner"].delete("/api/v1/workspaces/a").status_code == 409
    Service.objects.filter(workspace__name="a").delete()
    assert team["owner"].delete("/api/v1/workspaces/a").status_code == 204
    assert not Workspace.objects.filter(name="a").exists()


# --- the operator's command -------------------------------------------------------------------


def test_create_api_token_makes_the_user_workspace_and_membership():
    out = io.StringIO()
    call_command("create_api_token", "dana", "--workspace", "ml", "--role", "viewer", stdout=out)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {out.getvalue().strip()}")
    assert api.get("/api/v1/services").json() == []
    assert api.post("/api/v1/services", spec("x"), format="json").status_code == 403
    dana = get_user_model().objects.get(username="dana")
    assert not dana.is_staff
    assert Membership.objects.get(user=dana).workspace.name == "ml"
