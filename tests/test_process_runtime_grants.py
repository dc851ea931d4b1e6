"""The process runtime's engines run on the node's own account, which can read the control
plane's key files: a node running it starts no code of a workspace's choosing unless staff
granted `process_code`, whatever the API saw when the spec was saved (real database, the real
process runtime, the real starter)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.db import transaction

from controlplane.services.choices import InstanceState
from controlplane.services.models import Instance, Service
from controlplane.services.versions import record_version
from tests.api_support import default_workspace, grant
from tests.fleet_support import FLEET
from workers.nodes.starter import start_instance
from workers.runtimes.process import ProcessRuntime

pytestmark = pytest.mark.django_db


def reader(out: Path) -> dict:
    """A command that copies the node's secrets key where its workspace could read it."""
    command = f"cat {out.parent}/key > {out}.part && mv {out}.part {out}; exec sleep 30"
    return {"name": "reader", "containers": [{"image": "none", "command": command}]}


def placed(spec: dict) -> Instance:
    with transaction.atomic():  # saved past the API: on a Docker-only day, or before grants
        service = Service.objects.create(workspace=default_workspace(), name=spec["name"],
                                         spec=spec)  # fmt: skip
        version = record_version(service, spec, "created")
    return Instance.objects.create(service=service, name="reader-1", node="local",
                                   runtime="process", spec_hash=version.spec_hash,
                                   state=InstanceState.CREATING)  # fmt: skip


def test_a_workspaces_command_never_runs_on_the_nodes_account_ungranted(tmp_path, settings):
    (tmp_path / "key").write_text("the-secrets-key")
    out = tmp_path / "copied"
    runtime = ProcessRuntime(str(tmp_path / "models"), tmp_path / "instances")
    row = placed(reader(out))
    try:
        start_instance(row.name, "local", runtime, FLEET)
        row.refresh_from_db()
        assert row.state == InstanceState.FAILED
        assert "grants.process_code" in row.message and "containers[0].command" in row.message
        time.sleep(0.5)
        assert runtime.list() == [] and not out.exists()
        # Granted by staff: the same instance starts (and its command runs).
        grant(process_code=True)
        Instance.objects.filter(pk=row.pk).update(state=InstanceState.CREATING)
        start_instance(row.name, "local", runtime, FLEET)
        deadline = time.monotonic() + 10
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert out.read_text() == "the-secrets-key"
    finally:
        for instance in runtime.list():
            runtime.remove(instance.name)
