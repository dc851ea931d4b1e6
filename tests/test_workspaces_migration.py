"""A Wharf from before workspaces, migrated: its data moves into the `default` workspace and its
users keep what they could do there (real migrations on the configured database)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("workspaces", None), ("services", "0005_pd_ports"), ("tokens", "0002_apikey"),
          ("usage", "0003_usagebatch")]  # fmt: skip


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state([t for t in targets if t[1] is not None]).apps


@pytest.mark.django_db(transaction=True)
def test_existing_data_moves_into_the_default_workspace():
    old = migrate(BEFORE)
    users = old.get_model("auth", "User")
    root = users.objects.create(username="root", is_staff=True, is_superuser=True)
    ops = users.objects.create(username="ops", is_staff=True)
    dev = users.objects.create(username="dev")
    old.get_model("services", "Service").objects.create(name="qwen", spec={"name": "qwen"})
    old.get_model("tokens", "ApiToken").objects.create(user=dev, name="t", digest="d", hint="h")
    old.get_model("tokens", "ApiKey").objects.create(owner=dev, name="k", digest="e", hint="h")
    old.get_model("usage", "UsageRecord").objects.create(
        minute="2026-01-01T00:00Z", service="qwen", key_id="k1"
    )
    leaves = MigrationExecutor(connection).loader.graph.leaf_nodes()
    new = migrate(leaves)
    default = new.get_model("workspaces", "Workspace").objects.get()
    assert default.name == "default"
    roles = {m.user_id: m.role for m in new.get_model("workspaces", "Membership").objects.all()}
    assert roles == {root.pk: "owner", ops.pk: "admin", dev.pk: "developer"}
    for app, model in [("services", "Service"), ("tokens", "ApiToken"), ("tokens", "ApiKey"),
                       ("usage", "UsageRecord")]:  # fmt: skip
        assert {r.workspace_id for r in new.get_model(app, model).objects.all()} == {default.pk}
