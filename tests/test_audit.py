"""The audit trail through the real REST API and console: every change names who made it
(the user, and the token or the console), refused attempts too, reads are not audited, the
events show the actor, and /api/v1/audit answers per workspace."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from controlplane.audit.models import AuditEntry
from tests.api_support import client_for, member

pytestmark = pytest.mark.django_db


def spec(name: str) -> dict:
    return {"name": name, "containers": [{"image": "busybox", "command": "true"}],
            "metadata": {"instance": 0}}  # fmt: skip


def trail(api, **params) -> list[tuple]:
    entries = api.get("/api/v1/audit", params).json()
    return [(e["actor"], e["via"], e["action"], e["status"], e["service"]) for e in entries]


def test_every_change_names_its_actor_and_reads_are_not_audited():
    dev = client_for("dev", role="developer", workspace="a")
    viewer = client_for("watcher", role="viewer", workspace="a")
    assert dev.post("/api/v1/services", spec("svc"), format="json").status_code == 201
    assert dev.post("/api/v1/services/svc/stop").status_code == 202
    assert dev.get("/api/v1/services/svc").status_code == 200  # a read: not audited
    assert viewer.delete("/api/v1/services/svc").status_code == 403  # an attempt: audited
    assert dev.post("/api/v1/keys", {"name": "app"}, format="json").status_code == 201
    assert trail(viewer) == [
        ("dev", "token test", "POST /api/v1/keys", 201, None),
        ("watcher", "token test", "DELETE /api/v1/services/svc", 403, "svc"),
        ("dev", "token test", "POST /api/v1/services/svc/stop", 202, "svc"),
        ("dev", "token test", "POST /api/v1/services", 201, "svc"),
    ]
    assert trail(viewer, service="svc", actor="dev") == trail(viewer)[2:]


def test_the_events_show_who_asked():
    dev = client_for("dev", role="developer", workspace="a")
    dev.post("/api/v1/services", spec("svc"), format="json")
    dev.post("/api/v1/services/svc/stop")
    events = dev.get("/api/v1/services/svc/events").json()
    assert [(e["reason"], e["actor"]) for e in events] == [
        ("StopRequested", "dev (token test)"), ("Created", "dev (token test)")]  # fmt: skip


def test_console_changes_are_audited_as_the_console():
    user = get_user_model().objects.create_user("carol")
    member(user, "developer", "a")
    member(user, "viewer", "b")
    console = Client()
    console.force_login(user)
    assert console.post("/console/workspace", {"workspace": "b"}).status_code == 302
    (entry,) = AuditEntry.objects.all()
    assert (entry.actor, entry.via, entry.action) == ("carol", "console", "POST /console/workspace")


def test_each_workspace_sees_its_own_trail_and_staff_all():
    a = client_for("a-dev", role="developer", workspace="a")
    b = client_for("b-dev", role="developer", workspace="b")
    a.post("/api/v1/services", spec("a-svc"), format="json")
    b.post("/api/v1/services", spec("b-svc"), format="json")
    assert [t[4] for t in trail(a)] == ["a-svc"]
    staff = client_for("root", staff=True)
    assert {e["workspace"] for e in staff.get("/api/v1/audit").json()} == {"a", "b"}


def test_member_quota_and_grant_changes_land_in_the_changed_workspaces_trail():
    owner = client_for("olga", role="owner", workspace="a")
    client_for("newbie", role="viewer", workspace="elsewhere")
    staff = client_for("root", staff=True, workspace="elsewhere")  # its token acts elsewhere
    assert owner.post("/api/v1/workspaces/a/members", {"user": "newbie", "role": "viewer"},
                      format="json").status_code == 201  # fmt: skip
    assert owner.patch("/api/v1/workspaces/a", {"quotas": {"services": 3}},
                       format="json").status_code == 200  # fmt: skip
    assert staff.put("/api/v1/workspaces/a/grants", {"nfs": ["nas:/x"]},
                     format="json").status_code == 200  # fmt: skip
    assert [(t[0], t[2]) for t in trail(owner)] == [
        ("root", "PUT /api/v1/workspaces/a/grants"),
        ("olga", "PATCH /api/v1/workspaces/a"),
        ("olga", "POST /api/v1/workspaces/a/members"),
    ]


def test_the_operators_command_is_audited():
    call_command("create_api_token", "dana", "--workspace", "ml", "--role", "viewer",
                 stdout=io.StringIO())  # fmt: skip
    (entry,) = AuditEntry.objects.all()
    assert (entry.via, entry.action, entry.workspace.name) == (
        "command create_api_token",
        "create_api_token dana --workspace ml --role viewer",
        "ml",
    )


def test_bad_queries_are_named():
    api = client_for("dev", role="developer", workspace="a")
    bad = api.get("/api/v1/audit", {"since": "yesterday", "limit": "0", "colour": "red"})
    assert bad.status_code == 400 and set(bad.json()["errors"]) == {"since", "limit", "colour"}


def test_a_deleted_workspaces_own_deletion_stays_in_the_trail():
    """The entry of the DELETE that removed its workspace outlives it, with no workspace, as
    SET_NULL leaves the workspace's earlier entries."""
    owner = client_for("olga", role="owner", workspace="gone")
    assert owner.post("/api/v1/keys", {"name": "app"}, format="json").status_code == 201
    assert owner.delete("/api/v1/workspaces/gone").status_code == 204
    entries = AuditEntry.objects.filter(actor="olga").order_by("at")
    assert [(e.action, e.status, e.workspace_id) for e in entries] == [
        ("POST /api/v1/keys", 201, None),  # its workspace deleted since: SET_NULL
        ("DELETE /api/v1/workspaces/gone", 204, None),
    ]
