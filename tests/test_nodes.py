"""Nodes: state from heartbeats and marks (pure), registration by the worker's heartbeat, the
nodes API (the scheduler honouring cordon and drain is in tests/test_fleet.py), and
`manage.py worker` starting a real
worker that registers its node (the configured database, real Redis, real processes)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from controlplane.nodes.models import Node
from controlplane.nodes.state import crossed_a_deadline, node_state, parse_labels
from controlplane.services.models import Instance, Service
from launcher.stack import ROOT
from tests.api_support import client_for, default_workspace
from tests.system import redis_db
from workers.nodes.node import heartbeat
from workers.runtimes.process import ProcessRuntime

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=30)


@pytest.mark.parametrize(("age", "cordoned", "draining", "state"), [
    (5, False, False, "ready"),
    (29, False, False, "ready"),
    (31, False, False, "not_ready"),
    (None, False, False, "not_ready"),
    (5, True, False, "cordoned"),
    (5, True, True, "draining"),
    (60, True, True, "not_ready"),  # a silent node acts on nothing, whatever its marks
])  # fmt: skip
def test_a_nodes_state_comes_from_its_heartbeat_and_marks(age, cordoned, draining, state):
    beat = None if age is None else NOW - timedelta(seconds=age)
    assert node_state(beat, NOW, GRACE, cordoned, draining) == state


@pytest.mark.parametrize(("age", "looked_ago", "crossed"), [
    (5, 2, False),  # heard from lately
    (31, 2, True),  # silent past the grace (30 s) since the last look: out of routing
    (33, 2, False),  # past it before the last look: that look saw it
    (91, 2, True),  # past the grace and the eviction (60 s): placed elsewhere
    (89, 2, False),
    (None, 2, False),  # never heard from: nothing it held to follow
    (200, 150, True),  # a long gap between looks (a new beat leader) still sees it
])  # fmt: skip
def test_a_node_is_followed_once_as_its_silence_crosses_each_deadline(age, looked_ago, crossed):
    beat = None if age is None else NOW - timedelta(seconds=age)
    since = NOW - timedelta(seconds=looked_ago)
    assert crossed_a_deadline(beat, since, NOW, GRACE, timedelta(seconds=60)) is crossed


@pytest.mark.django_db(transaction=True)  # the follower's thread reads on its own connection
def test_the_services_of_a_node_falling_silent_get_a_pass(monkeypatch, redis_url, settings):
    """Not at the next reconcile-all (30 s by default): at the next look (every 2 s)."""
    from workers import tasks

    settings.REDIS_URL = redis_url
    settings.WHARF_NODE_GRACE, settings.WHARF_NODE_EVICT = 30, 60
    asked: list[str] = []
    monkeypatch.setattr(tasks, "enqueue_reconcile", asked.append)
    now = timezone.now()
    for name, silent in (("quiet", 31), ("busy", 1)):
        Node.objects.create(
            name=name, address="10.0.0.1", heartbeat_at=now - timedelta(seconds=silent)
        )
        service = Service.objects.create(workspace=default_workspace(), name=f"on-{name}", spec={})
        Instance.objects.create(service=service, name=f"on-{name}-1", node=name)
    tasks.client().set(tasks.FOLLOWED_KEY, (now - timedelta(seconds=2)).timestamp())
    assert tasks.follow_nodes() == {"on-quiet"}
    assert tasks.follow_nodes() == set()  # the next look: nothing crossed since
    # Each worker's follower thread looks (one at a time, under its lease) and asks the passes.
    tasks.client().set(tasks.FOLLOWED_KEY, (now - timedelta(seconds=2)).timestamp())
    follower = tasks.NodeFollower(interval=0.05)
    follower.start()
    try:
        deadline = time.monotonic() + 10
        while not asked and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        follower.stop()
        follower.join(5)
    assert asked == ["on-quiet"]


@pytest.mark.parametrize(("text", "labels"), [
    ("", {}), ("gpu=h200", {"gpu": "h200"}), ("flag=", {"flag": ""}),
    (" gpu = h200 , zone=a,", {"gpu": "h200", "zone": "a"}),
])  # fmt: skip
def test_labels_are_key_value_pairs(text, labels):
    assert parse_labels(text) == labels


@pytest.mark.parametrize("text", ["gpu", "=h200", "a=b,c"])
def test_a_label_that_is_not_key_value_is_named(text):
    with pytest.raises(ValueError, match="is not key=value"):
        parse_labels(text)


@pytest.mark.django_db
def test_the_heartbeat_registers_the_node_and_keeps_the_operators_marks(tmp_path, settings):
    settings.WHARF_NODE_NAME, settings.WHARF_NODE_LABELS = "n1", "zone=a"
    settings.WHARF_MODEL_DIR, settings.WHARF_CACHE_DIR = tmp_path / "models", tmp_path / "cache"
    (tmp_path / "models" / "tiny-llama").mkdir(parents=True)
    staged = "bucket-m-0123456789abcdef"
    (tmp_path / "cache" / f"{staged}@fedcba9876543210").mkdir(parents=True)
    runtime = ProcessRuntime(str(tmp_path), tmp_path / "instances")
    assert heartbeat(runtime)  # registered: its inventory written
    node = Node.objects.get(name="n1")
    assert node.cached_models == ["tiny-llama", staged]  # placement prefers these nodes
    assert (node.name, node.address, node.labels, node.runtime) == (
        "n1", settings.WHARF_NODE_ADDRESS, {"zone": "a"}, "process",
    )  # fmt: skip
    assert node.cpus == os.cpu_count() and node.memory_mb > 0 and node.version
    assert node.state == "ready" and len(node.inventory_digest) == 16
    Node.objects.filter(name="n1").update(cordoned=True, heartbeat_at=None)
    assert not heartbeat(runtime)  # nothing changed: only the beat's time is written
    assert Node.objects.get(name="n1").state == "cordoned"
    settings.WHARF_NODE_LABELS = "zone=b"
    assert heartbeat(runtime)  # a new label: the inventory again, with its new digest
    again = Node.objects.get(name="n1")
    assert again.labels == {"zone": "b"} and again.inventory_digest != node.inventory_digest
    assert again.state == "cordoned"


@pytest.mark.django_db
def test_the_api_lists_nodes_with_their_state_cards_and_instances():
    h200 = {"kind": "gpu", "name": "H200", "memory_mb": 143771}
    Node.objects.create(name="gpu-1", address="10.0.0.1", heartbeat_at=timezone.now(),
                        cards=[{**h200, "index": 0}, {**h200, "index": 1}])  # fmt: skip
    Node.objects.create(name="gone", address="10.0.0.2",
                        heartbeat_at=timezone.now() - timedelta(minutes=5))  # fmt: skip
    service = Service.objects.create(
        workspace=default_workspace(), name="qwen", spec={"name": "qwen"}
    )
    Instance.objects.create(service=service, name="qwen-1", runtime="docker", node="gpu-1",
                            devices="gpu:1", spec_hash="h", state="ready")  # fmt: skip
    api = client_for("alice")
    listed = {n["name"]: n for n in api.get("/api/v1/nodes").json()}
    assert {name: n["state"] for name, n in listed.items()} == {
        "gpu-1": "ready",
        "gone": "not_ready",
    }
    node = api.get("/api/v1/nodes/gpu-1").json()
    assert node["card_counts"] == {"gpu": {"total": 2, "used": 1, "free": 1}}
    assert [c["instance"] for c in node["cards"]] == [None, "qwen-1"]
    assert node["instances"] == [{"name": "qwen-1", "service": "qwen", "role": "",
                                  "state": "ready", "cards": "gpu:1"}]  # fmt: skip
    assert [n["name"] for n in api.get("/api/v1/nodes?state=not_ready").json()] == ["gone"]
    assert "state" in api.get("/api/v1/nodes?state=sideways").json()["errors"]
    assert api.get("/api/v1/nodes/nowhere").status_code == 404
    # Another workspace sees the card taken, not by whom.
    other = client_for("bob", workspace="other").get("/api/v1/nodes/gpu-1").json()
    assert other["card_counts"] == node["card_counts"] and other["instances"] == []
    assert [c["instance"] for c in other["cards"]] == [None, "(another workspace's)"]
    staff = client_for("root", staff=True, workspace="other").get("/api/v1/nodes/gpu-1").json()
    assert staff["instances"] == node["instances"]


@pytest.mark.django_db
def test_a_nodes_images_and_cached_models_are_shown_to_the_workspaces_that_use_them():
    Node.objects.create(
        name="gpu-1", address="10.0.0.1", heartbeat_at=timezone.now(),
        images=["registry.corp/team-a/secret-engine:7", "vllm/vllm-openai:v0.32.0", "other:1"],
        cached_models=["tiny-llama", "hf://team-a/private-model", "s3/bucket-key"],
    )  # fmt: skip
    mine = {"name": "a1", "containers": [{"image": "registry.corp/team-a/secret-engine:7"}],
            "llm": {"engine": "vllm", "model": "hf://team-a/private-model@abc"}}  # fmt: skip
    Service.objects.create(workspace=default_workspace(), name="a1", spec=mine)
    other = client_for("bob", workspace="team-b")
    Service.objects.create(workspace=other.user.memberships.get().workspace, name="b1",
                           spec={"name": "b1", "llm": {"engine": "vllm",
                                                      "model": "tiny-llama"}})  # fmt: skip
    seen = client_for("alice").get("/api/v1/nodes/gpu-1").json()
    assert seen["images"] == ["registry.corp/team-a/secret-engine:7"]
    assert seen["cached_models"] == ["hf://team-a/private-model"]
    theirs = other.get("/api/v1/nodes").json()[0]
    assert theirs["images"] == ["vllm/vllm-openai:v0.32.0"]  # the engine's own image
    assert theirs["cached_models"] == ["tiny-llama"]
    staff = client_for("root", staff=True, workspace="team-b").get("/api/v1/nodes/gpu-1").json()
    assert len(staff["images"]) == 3 and len(staff["cached_models"]) == 3


@pytest.mark.django_db
def test_staff_cordon_drain_and_uncordon_a_node(django_capture_on_commit_callbacks):
    Node.objects.create(name="n1", address="10.0.0.1", heartbeat_at=timezone.now())
    assert client_for("alice").post("/api/v1/nodes/n1/cordon").status_code == 403
    staff = client_for("root", staff=True)
    for action, state in [("cordon", "cordoned"), ("drain", "draining"), ("uncordon", "ready")]:
        with django_capture_on_commit_callbacks():  # the reconcile they trigger is not run here
            answer = staff.post(f"/api/v1/nodes/n1/{action}")
        assert answer.status_code == 202 and answer.json()["state"] == state
    assert staff.post("/api/v1/nodes/n1/reboot").status_code == 404
    assert staff.post("/api/v1/nodes/nowhere/cordon").status_code == 404


@pytest.mark.parametrize(("args", "message"), [
    (["--node", "Bad_Name"], "--node 'bad_name'"),
    (["--address", "gpu-host"], "--address 'gpu-host' is not an IP address"),
    (["--labels", "gpu"], "--labels: label 'gpu' is not key=value"),
])  # fmt: skip
def test_the_worker_command_names_a_bad_setting(tmp_path, args, message):
    env = {**os.environ, "WHARF_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "worker", *args], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode != 0 and message in done.stderr


@pytest.mark.timeout(120)
def test_the_worker_command_starts_a_worker_that_registers_its_node(tmp_path, redis_url):
    env = {**os.environ, "WHARF_HOME": str(tmp_path), "DATABASE_URL": "",
           "REDIS_URL": redis_db(redis_url, 13), "WHARF_RUNTIME": "process",
           "WHARF_NODE_HEARTBEAT": "1"}  # fmt: skip
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v0"], env=env, cwd=ROOT, check=True)
    worker = subprocess.Popen(
        [*manage, "worker", "--node", "gpu-2", "--address", "127.0.0.2", "--labels", "zone=b"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline, row = time.monotonic() + 60, None
        while row is None and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.5)
            with sqlite3.connect(tmp_path / "wharf.sqlite3") as db:
                row = db.execute(
                    "SELECT address, labels, runtime FROM nodes_node WHERE name = 'gpu-2'"
                ).fetchone()
        assert row == ("127.0.0.2", '{"zone": "b"}', "process"), f"worker exit {worker.poll()}"
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        assert worker.wait(60) is not None
