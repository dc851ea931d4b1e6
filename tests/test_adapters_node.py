"""A node's folder of a service's LoRA adapters (workers.models.adapters.provide) and when an
instance's adapters are synced (workers.models.adapters.due), against real files and rows."""

from __future__ import annotations

import os

import pytest

from contracts.engines.models import adapter_folder
from contracts.spec_models import Adapter
from controlplane.services.choices import InstanceState
from controlplane.services.models import Instance, Service
from tests.api_support import default_workspace
from workers.models import adapters


@pytest.fixture
def node(settings, tmp_path):
    settings.WHARF_HOME = tmp_path / "home"
    settings.WHARF_MODEL_DIR = tmp_path / "models"
    (tmp_path / "models" / "tiny-sql").mkdir(parents=True)
    (tmp_path / "models" / "tiny-sql" / "adapter_config.json").write_text("{}")
    return tmp_path


def NO_FETCH(ref: str):  # noqa: N802 (a constant's name)
    raise AssertionError(f"{ref} is not in object storage or on a hub")


def test_a_store_adapter_is_linked_into_the_services_folder_once(node):
    folder = adapters.adapters_dir("assistant")
    adapter = Adapter(name="sql", model="tiny-sql")
    adapters.provide(adapter, folder, NO_FETCH)
    placed = folder / adapter_folder("sql", "tiny-sql")
    source = node / "models" / "tiny-sql" / "adapter_config.json"
    assert os.path.samefile(placed / "adapter_config.json", source)  # a hard link, no copy
    assert oct(placed.stat().st_mode & 0o777) == "0o755"
    adapters.provide(adapter, folder, NO_FETCH)  # again: nothing to do
    assert [p.name for p in folder.iterdir()] == [placed.name]
    # The same name from elsewhere is a folder of its own: engines switch on their next sync.
    assert adapter_folder("sql", "tiny-sql") != adapter_folder("sql", "s3://b/sql/")
    adapters.forget("assistant")
    assert not folder.exists()


def test_what_the_node_cannot_provide_says_why(node):
    folder = adapters.adapters_dir("assistant")
    with pytest.raises(adapters.AdapterError, match="'nope' is not in this node's model store"):
        adapters.provide(Adapter(name="x", model="nope"), folder, NO_FETCH)
    adapters.provide(
        Adapter(name="x", model="/mnt/adapters/x"), folder, NO_FETCH
    )  # a mount's: as is
    assert not folder.exists() or not any(folder.iterdir())


@pytest.mark.django_db
def test_an_instance_is_synced_when_its_services_adapters_changed_or_one_failed_a_while_ago():
    service = Service.objects.create(workspace=default_workspace(), name="assistant", spec={},
                                     generation=3)  # fmt: skip

    def row(state: dict) -> Instance:
        return Instance(service=service, name="i", node="n", runtime="process", spec_hash="h",
                        state=InstanceState.READY, adapters=state)  # fmt: skip

    now = 1000.0
    assert not adapters.due(row({}), now)  # not tracked: nothing to sync
    assert adapters.due(row({"generation": 2, "loaded": [], "failed": {}}), now)
    assert not adapters.due(row({"generation": 3, "loaded": ["sql"], "failed": {}}), now)
    failed = {"generation": 3, "loaded": [], "failed": {"sql": "bad"}}
    assert not adapters.due(row({**failed, "at": now - 5}), now)
    assert adapters.due(row({**failed, "at": now - adapters.RETRY_S}), now)
