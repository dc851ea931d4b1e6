"""A service's tokenizer, read where its model is (contracts.node_tokenizer,
workers.nodes.node_tokenizer): the node of an instance finds the folder that instance's engine reads
(model store, staged object storage, hub commit, a path in a container or on the node) and gives
only the tokenizer's small files from inside it; the API asks that node through Redis, as for logs,
with the same rights (GET /api/v1/services/<name>/tokenizer).

The node's runtime here is an in-memory one that observes what the test says runs (no engine
is started); the folders, the database, Redis and the node's server thread are real."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from contracts.engines.plan import Placement
from contracts.node_tokenizer import MIB, TOKENIZER_FILES
from contracts.object_store import source_from_env
from controlplane.services.models import Instance, Service
from controlplane.services.tiny_model import write_tiny_model
from tests.api_support import client_for, default_workspace
from workers.models import storage
from workers.nodes.node_tokenizer import TokenizerServer, tokenizer_of
from workers.runtimes.base import ObservedInstance
from workers.runtimes.memory import MemoryRuntime

COMMIT = "0123456789abcdef0123456789abcdef01234567"
TINY = ["special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]  # its tokenizer


class Node(MemoryRuntime):
    """Node `n`'s runtime: it observes the instances the test puts there, with the paths they
    read; its model store, and whether engines run in containers, are the test's."""

    def __init__(self, store: Path, in_container: bool = False):
        super().__init__("n")
        self.store, self.in_container = store, in_container

    def placement(self) -> Placement:
        return Placement(in_container=self.in_container, model_store=str(self.store))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny")


@pytest.fixture(autouse=True)
def cache(tmp_path, settings) -> Path:
    """The node's staging cache (WHARF_CACHE_DIR)."""
    settings.WHARF_CACHE_DIR = tmp_path / "cache"
    return settings.WHARF_CACHE_DIR


@pytest.fixture
def node(tmp_path) -> Node:
    return Node(tmp_path / "store")


def copy_of(tiny: Path, folder: Path) -> Path:
    """The tiny model (weights included) in `folder`."""
    shutil.copytree(tiny, folder)
    return folder


def staged(uri: str, cache: Path, tiny: Path, version: str = "0" * 16) -> Path:
    """A staged copy of object-storage model `uri` as workers.models.storage names it."""
    return copy_of(tiny, cache / f"{storage.cache_key(source_from_env(uri))}@{version}")


def place(node: Node, llm: dict, paths=(), storage_entries=(), name="svc", where="n") -> str:
    """Service `name` with one ready instance on node `where`, which node `n`'s runtime runs
    (reading `paths`) when it is there; the instance's name."""
    spec = {"name": name, "llm": {"engine": "vllm-cpu", **llm}, "storage": list(storage_entries)}
    service = Service.objects.create(workspace=default_workspace(), name=name, spec=spec)
    spec_hash = service.parsed_spec().spec_hash()
    row = Instance.objects.create(service=service, name=f"{name}-a", runtime="process",
                                  node=where, spec_hash=spec_hash, state="ready")  # fmt: skip
    node.instances[row.name] = ObservedInstance(
        service=name, name=row.name, spec_hash=spec_hash, running=True, url=None,
        paths=tuple(str(p) for p in paths),
    )  # fmt: skip
    return row.name


def answered(node: Node, instance: str) -> dict:
    return json.loads(tokenizer_of("n", node, instance))


def assert_tiny(answer: dict, tiny: Path) -> None:
    assert sorted(answer.get("files", {})) == TINY, answer
    assert answer["files"]["tokenizer.json"] == (tiny / "tokenizer.json").read_text()


# ---- on the node -----------------------------------------------------------------------------


def test_a_model_store_model_is_read_from_the_nodes_own_store(db, node, tiny):
    copy_of(tiny, node.store / "org" / "tiny")
    assert_tiny(answered(node, place(node, {"model": "org/tiny"})), tiny)


def test_an_object_storage_model_is_read_from_the_copy_its_instance_reads(db, node, tiny,
                                                                          settings):  # fmt: skip
    uri = "s3://models/tiny/"
    own = staged(uri, settings.WHARF_CACHE_DIR, tiny, "1" * 16)
    newer = staged(uri, settings.WHARF_CACHE_DIR, tiny, "2" * 16)
    (newer / "tokenizer.json").write_text('{"a": "newer copy"}')
    assert_tiny(answered(node, place(node, {"model": uri}, paths=[own])), tiny)


def test_without_a_recorded_path_the_nodes_newest_copy_is_read(db, node, tiny, settings):
    uri = "s3://models/tiny/"
    staged(uri, settings.WHARF_CACHE_DIR, tiny)
    assert_tiny(answered(node, place(node, {"model": uri})), tiny)


@pytest.mark.parametrize("recorded", [True, False], ids=["its path", "the pinned commit"])
def test_a_hub_model_is_read_from_the_commit_its_instance_reads(db, node, tiny, settings,
                                                                recorded):  # fmt: skip
    folder = copy_of(tiny, settings.WHARF_CACHE_DIR / "hub" / "hf" / "wharf" / "tiny" / COMMIT)
    instance = place(node, {"model": f"hf://wharf/tiny@{COMMIT}"},
                     paths=[folder] if recorded else [])  # fmt: skip
    assert_tiny(answered(node, instance), tiny)


def test_a_path_in_a_container_is_read_from_the_staged_mount_providing_it(db, tiny, settings,
                                                                          tmp_path):  # fmt: skip
    node = Node(tmp_path / "store", in_container=True)
    own = staged("s3://models/all/", settings.WHARF_CACHE_DIR, tiny.parent)  # tiny/ inside
    entry = {"mount_path": "/mnt/models", "s3": {"path": "s3://models/all/"}}
    instance = place(node, {"model": "/mnt/models/tiny"}, paths=[own], storage_entries=[entry])
    assert_tiny(answered(node, instance), tiny)


def test_a_path_of_a_local_process_is_read_where_it_is_on_the_node(db, node, tiny):
    assert_tiny(answered(node, place(node, {"model": str(tiny)})), tiny)


def test_a_path_on_an_nfs_mount_is_refused_by_name(db, tmp_path):
    node = Node(tmp_path / "store", in_container=True)
    entry = {"mount_path": "/mnt/nfs", "nfs": {"server": "10.0.0.2", "path": "/models"}}
    answer = answered(node, place(node, {"model": "/mnt/nfs/qwen"}, storage_entries=[entry]))
    assert answer == {"error": "/mnt/nfs/qwen on node n: its nfs mount is not on this node's disk"}


def test_only_a_tokenizers_own_files_are_read_never_weights_or_others(db, node, tiny):
    folder = copy_of(tiny, node.store / "full")
    for name in TOKENIZER_FILES[3:]:
        (folder / name).write_text(f"{name}\n")
    (folder / "secret.json").write_text("{}")
    files = answered(node, place(node, {"model": "full"}))["files"]
    assert sorted(files) == sorted(TOKENIZER_FILES)
    assert files["merges.txt"] == "merges.txt\n"


def test_an_oversized_tokenizer_is_refused_naming_the_file(db, node, tiny):
    folder = copy_of(tiny, node.store / "huge")
    with open(folder / "tokenizer.json", "r+b") as handle:
        handle.truncate(64 * MIB + 1)  # sparse: nothing is written
    answer = answered(node, place(node, {"model": "huge"}))
    assert answer == {"error": "huge on node n: its tokenizer.json is larger than 64 MiB"}


def test_a_tokenizer_file_linking_out_of_the_models_folder_is_not_read(db, node, tiny, tmp_path):
    (tmp_path / "outside.json").write_text('{"secret": "of the node"}')
    folder = copy_of(tiny, node.store / "linked")
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").symlink_to(tmp_path / "outside.json")
    answer = answered(node, place(node, {"model": str(folder)}))
    assert "secret" not in json.dumps(answer) and "has no tokenizer.json" in answer["error"]


def test_an_instance_placed_on_another_node_is_not_answered(db, node, tiny):
    copy_of(tiny, node.store / "tiny")
    instance = place(node, {"model": "tiny"}, where="m")
    assert answered(node, instance) == {"error": f"instance {instance} is not on node n"}


# ---- through the API -------------------------------------------------------------------------


@pytest.fixture
def serving(transactional_db, node, settings, redis_url):
    """Node n's worker answering tokenizer requests from Redis, in a thread of its own."""
    settings.REDIS_URL = redis_url
    server = TokenizerServer("n", node)
    server.start()
    yield node
    server.stop()
    server.join(5)


def test_the_api_serves_the_tokenizer_the_instances_node_reads(serving, tiny, settings):
    uri = "s3://models/tiny/"
    place(serving, {"model": uri}, paths=[staged(uri, settings.WHARF_CACHE_DIR, tiny)])
    answer = client_for("dev").get("/api/v1/services/svc/tokenizer")
    assert answer.status_code == 200, answer.content
    assert (answer.json()["model"], answer.json()["node"]) == (uri, "n")
    assert_tiny(answer.json(), tiny)


def test_another_workspaces_service_has_no_tokenizer_to_read(serving, tiny):
    place(serving, {"model": str(tiny)})
    outsider = client_for("mallory", workspace="elsewhere")
    assert outsider.get("/api/v1/services/svc/tokenizer").status_code == 404
    viewer = client_for("vera", role="viewer")  # who reads its logs reads its tokenizer
    assert viewer.get("/api/v1/services/svc/tokenizer").status_code == 200


def test_what_the_node_cannot_give_is_a_404_with_its_reason(serving):
    place(serving, {"model": "hf://wharf/absent"})
    answer = client_for("dev").get("/api/v1/services/svc/tokenizer")
    assert answer.status_code == 404
    detail = answer.json()["detail"]
    assert "hf://wharf/absent on node n: it is not staged on this node" in detail
    assert "--tokenizer" in detail


def test_a_node_that_does_not_answer_is_a_504_naming_it(serving, monkeypatch):
    place(serving, {"model": "s3://models/tiny/"}, where="gone")
    monkeypatch.setattr("contracts.node_tokenizer.fetch.__defaults__", (0.5,))
    answer = client_for("dev").get("/api/v1/services/svc/tokenizer")
    assert answer.status_code == 504
    assert "node gone did not answer" in answer.json()["detail"]


def test_a_stopped_service_says_to_start_it_or_pass_a_tokenizer(serving):
    llm = {"engine": "vllm-cpu", "model": "s3://models/tiny/"}
    Service.objects.create(workspace=default_workspace(), name="idle",
                           spec={"name": "idle", "llm": llm})  # fmt: skip
    answer = client_for("dev").get("/api/v1/services/idle/tokenizer")
    assert answer.status_code == 404
    assert "start the service" in answer.json()["detail"]
    assert "--tokenizer" in answer.json()["detail"]


def test_nothing_is_left_queued_for_a_node(serving, tiny, redis_url):
    import redis

    place(serving, {"model": str(tiny)})
    assert client_for("dev").get("/api/v1/services/svc/tokenizer").status_code == 200
    with redis.Redis.from_url(redis_url) as client:
        assert client.llen("wharf:tokenizer:n") == 0
        assert not [key for key in client.scan_iter("wharf:tokenizer:reply:*")]
