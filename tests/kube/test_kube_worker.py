"""A worker of WHARF_RUNTIME=kubernetes as deployed: pointed at a cluster by WHARF_KUBECONFIG
alone, its reconcile task drives the cluster; its threads answer the API's log requests from
the pods and the nodes API shows the cluster's nodes (the fake API server, real database and
Redis)."""

from __future__ import annotations

import pytest
import yaml
from django.db import transaction

from contracts.kube import names
from contracts.node_logs import CLUSTER
from controlplane.services.models import Service
from controlplane.services.versions import record_version
from tests.api_support import default_workspace
from workers import celery, tasks
from workers.kube import runtime
from workers.nodes.node_logs import LogServer

pytestmark = pytest.mark.django_db

SPEC = {
    "name": "chat",
    "metadata": {"instance": 1, "gpu": 1},
    "containers": [{"image": "vllm/vllm-openai:v0.32.0", "port": 8000}],
    "llm": {"engine": "vllm", "model": "/models/qwen"},
}


@pytest.fixture
def worker(kube, store, settings, tmp_path):
    """The settings a worker on the cluster has: the runtime, a kubeconfig, the namespace."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": kube.url}}],
        "users": [{"name": "wharf", "user": {"token": "not-checked-by-the-fake"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "wharf"}}],
    }  # fmt: skip
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    settings.WHARF_RUNTIME = "kubernetes"
    settings.WHARF_KUBECONFIG = str(path)
    settings.WHARF_K8S_NAMESPACE = "default"
    runtime.cluster.cache_clear()
    yield kube
    runtime.cluster.cache_clear()


def deploy() -> Service:
    with transaction.atomic():
        service = Service.objects.create(workspace=default_workspace(), name="chat", spec=SPEC)
        record_version(service, SPEC, "created")
    return service


def running(worker) -> None:
    """The service deployed, its pods ready, the worker's passes having seen them."""
    deploy()
    worker.cluster.auto_ready = True
    for _ in range(2):
        tasks.reconcile_isolated("chat")
        worker.cluster.settle()


def test_the_reconcile_task_drives_the_cluster_the_kubeconfig_names(worker):
    deploy()
    tasks.reconcile_isolated("chat")
    worker.cluster.auto_ready = True
    worker.cluster.settle()
    assert tasks.reconcile_isolated("chat") is None  # settled: every pod ready
    deployment = worker.apps.read_namespaced_deployment("chat", "default")
    assert deployment.metadata.labels[names.LABEL_SERVICE] == "chat"
    assert Service.objects.get(name="chat").phase == "running"


def test_a_pods_log_reaches_the_api_through_the_clusters_log_server(worker, api):
    running(worker)
    pod = Service.objects.get(name="chat").instances.get()
    worker.cluster.set_log(pod.name, "INFO started\nINFO ready\n")
    threads = celery._cluster_threads(lambda name: None)
    assert [type(t).__name__ for t in threads] == ["LogServer", "Watcher", "Scraper"]
    (server,) = [t for t in threads if isinstance(t, LogServer)]
    server.start()
    try:
        answer = api.get(f"/api/v1/services/chat/instances/{pod.name}/logs?tail=1")
    finally:
        server.stop()
        server.join(5)
    assert answer.status_code == 200, answer.content
    assert answer.json()["logs"].strip() == "INFO ready"
    assert pod.runtime == CLUSTER


def test_the_nodes_api_lists_the_clusters_nodes_and_the_cards_wharfs_pods_hold(worker, api):
    running(worker)
    from workers.kube import nodes

    nodes.sync(runtime.cluster(), runtime.kube_settings())
    listed = {n["name"]: n for n in api.get("/api/v1/nodes").json()}
    assert set(listed) == {"gpu-node-1", "gpu-node-2", "npu-node-1"}
    pod = Service.objects.get(name="chat").instances.get()
    assert listed[pod.node]["card_counts"]["gpu"] == {"total": 8, "used": 1, "free": 7}
    assert listed["npu-node-1"]["card_counts"]["npu"]["total"] == 8
    assert all(n["state"] == "ready" for n in listed.values())


def test_a_kubernetes_node_is_cordoned_with_kubectl_not_with_wharf(worker, db):
    from tests.api_support import client_for
    from workers.kube import nodes

    nodes.sync(runtime.cluster(), runtime.kube_settings())
    staff = client_for("root", staff=True)
    answer = staff.post("/api/v1/nodes/gpu-node-1/drain")
    assert answer.status_code == 409
    assert "kubectl drain gpu-node-1" in answer.json()["detail"]
    assert staff.get("/api/v1/nodes/gpu-node-1").json()["draining"] is False


@pytest.mark.parametrize(
    ("llm", "field", "words"),
    [
        ({"engine": "vllm", "model": "qwen"}, "llm.model", "WHARF_K8S_MODEL_CLAIM"),
        ({"engine": "vllm-cpu", "model": "/models/tiny",
          "pd": {"kv_connector": "ExampleConnector", "prefill": {"instance": 1},
                 "decode": {"instance": 1}}}, "llm.pd.kv_connector", "WHARF_K8S_KV_CLAIM"),
    ],
)  # fmt: skip
def test_the_api_refuses_what_the_cluster_cannot_run_naming_the_field(
    api, settings, llm, field, words
):
    settings.WHARF_RUNTIME = "kubernetes"
    settings.WHARF_K8S_MODEL_CLAIM = settings.WHARF_K8S_KV_CLAIM = ""
    data = {**SPEC, "name": "nofit", "llm": llm}
    for path in ("/api/v1/services/preview", "/api/v1/services"):
        answer = api.post(path, data, format="json")
        assert answer.status_code == 400, answer.content
        assert list(answer.json()["errors"]) == [field] and words in str(answer.json())
    assert not Service.objects.filter(name="nofit").exists()
    settings.WHARF_K8S_MODEL_CLAIM = settings.WHARF_K8S_KV_CLAIM = "shared"
    assert api.post("/api/v1/services/preview", data, format="json").status_code == 200
