"""The Kubernetes runtime's whole cycle against the fake API server (tests/kube), with the real
database and Redis: create, observe ready pods, route to them, update as a rolling update,
scale, drain, the scheduler's and the kubelet's warnings, a stalled rollout, logs, nodes,
the watch, and delete through the root, touching nothing Wharf did not create; and the RBAC
Role in deploy/kubernetes allows exactly the requests the cycle made (a canary release's
among them: tests/kube/test_kube_canary.py has the rest)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from django.db import transaction

from contracts.canary import ABORTED
from contracts.engine_keys import engine_key
from contracts.kube import names
from contracts.spec import parse_spec
from controlplane.nodes.models import Node
from controlplane.services.canaries import finish
from controlplane.services.choices import DesiredState
from controlplane.services.models import Canary, Event, Instance, Service
from controlplane.services.sealing import seal
from controlplane.services.versions import record_version
from tests.api_support import default_workspace, published
from workers.kube import nodes
from workers.kube.api import APPLY, Cluster
from workers.kube.reconcile import reconcile
from workers.kube.runtime import PodLogs, Watcher

pytestmark = pytest.mark.django_db
KUBE = names.KubeSettings(namespace="default", pre_stop_s=5)
RBAC = Path(__file__).resolve().parents[2] / "deploy/kubernetes/base/rbac.yaml"
SPECS = Path(__file__).resolve().parents[2] / "deploy_specs"


IMAGE = "vllm/vllm-openai:v0.32.0"


def spec(name: str = "chat", instances: int = 2, gpu: int = 1, image: str = IMAGE,
         env: list | None = None, **extra) -> dict:  # fmt: skip
    container = {"image": image, "port": 8000, **({"env": env} if env else {})}
    return {
        "name": name,
        "metadata": {"instance": instances, "gpu": gpu, "cpu": 4, "memory": 16384},
        "containers": [container],
        "llm": {"engine": "vllm", "model": "/models/qwen"},  # a path in the image: no claim
        "rolling_strategy": {"max_surge": 1, "max_unavailable": 0},
        **extra,
    }


@pytest.fixture
def cluster(kube, store, settings) -> Cluster:
    settings.WHARF_RUNTIME = "kubernetes"
    return Cluster(kube.api_client, "default")


def deploy(data: dict) -> Service:
    with transaction.atomic():
        service = Service.objects.create(workspace=default_workspace(), name=data["name"],
                                         spec=data)  # fmt: skip
        record_version(service, data, "created")
    return service


def update(name: str, data: dict, note: str = "updated") -> None:
    with transaction.atomic():
        service = Service.objects.get(name=name)
        Service.objects.filter(pk=service.pk).update(spec=data, generation=service.generation + 1)
        record_version(service, data, note)


def settle(kube, cluster: Cluster, name: str, passes: int = 3, conf=KUBE) -> Service:
    """Passes and the cluster's controllers, in turn, until both rest."""
    for _ in range(passes):
        reconcile(name, cluster, conf)
        kube.cluster.settle()
    reconcile(name, cluster, conf)
    return Service.objects.get(name=name)


def ready(kube, cluster: Cluster, name: str) -> Service:
    """Settled with every pod it has now ready (pods made later are not, until told)."""
    settle(kube, cluster, name)
    kube.cluster.set_ready(names.selector(name))
    return settle(kube, cluster, name)


def rows(name: str) -> list[Instance]:
    return list(Instance.objects.filter(service__name=name).order_by("name"))


def reasons(name: str) -> list[str]:
    return list(Event.objects.filter(service__name=name).values_list("reason", flat=True))


def test_a_service_becomes_a_deployment_whose_ready_pods_are_routed(kube, cluster, store):
    deploy(spec())
    service = settle(kube, cluster, "chat")
    assert service.phase == "deploying"  # pods run, none ready yet
    deployment = kube.apps.read_namespaced_deployment("chat", "default")
    assert deployment.spec.replicas == 2
    assert deployment.metadata.labels[names.LABEL_MANAGED_BY] == "wharf"
    root = kube.core.read_namespaced_config_map(names.root_name("chat"), "default")
    assert deployment.metadata.owner_references[0].uid == root.metadata.uid
    kube.cluster.set_ready(names.selector("chat"))
    service = settle(kube, cluster, "chat")
    assert (service.phase, service.ready_instances) == ("running", 2)
    pods = rows("chat")
    assert {r.state for r in pods} == {"ready"} and all(r.runtime == "kubernetes" for r in pods)
    assert all(r.url.startswith("http://10.") and r.url.endswith(":18999") for r in pods)
    assert {r.node for r in pods} <= {"gpu-node-1", "gpu-node-2"}
    routed = published(store).services["chat"].instances
    assert {i.name for i in routed} == {r.name for r in pods}
    # The pods' engine key: the Deployment's, held in the Secret, which the gateway derives.
    assert {i.key for i in routed} == {"k8s/chat"}
    secret = kube.core.read_namespaced_secret(names.secret_name("chat"), "default")
    import base64

    from django.conf import settings

    held = base64.b64decode(secret.data["engine-key"]).decode()
    assert held == engine_key(settings.WHARF_TOKEN_KEY.encode(), "k8s/chat")
    assert {"InstanceCreated", "InstanceReady", "Running"} <= set(reasons("chat"))


def test_an_update_rolls_one_pod_at_a_time_and_terminating_pods_leave_routing_at_once(
    kube, cluster, store
):
    deploy(spec())
    ready(kube, cluster, "chat")
    assert settle(kube, cluster, "chat").phase == "running"
    old = {r.name for r in rows("chat")}
    update("chat", spec(env=[{"name": "HF_HUB_OFFLINE", "value": "1"}]))
    service = settle(kube, cluster, "chat")
    # maxSurge 1, maxUnavailable 0: one new pod, not ready; both old ones still serve.
    new = {r.name for r in rows("chat")} - old
    assert len(new) == 1 and service.phase == "updating"
    assert {i.name for i in published(store).services["chat"].instances} == old
    kube.cluster.set_ready(next(iter(new)))
    settle(kube, cluster, "chat")
    draining = [r for r in rows("chat") if r.state == "draining"]
    assert len(draining) == 1 and draining[0].name in old
    routed = {i.name for i in published(store).services["chat"].instances}
    assert draining[0].name not in routed  # terminating: out of routing at once
    pod = kube.core.read_namespaced_pod(draining[0].name, "default")
    grace = 30 + KUBE.pre_stop_s  # the spec's termination grace and the preStop wait
    assert pod.metadata.deletion_grace_period_seconds == grace
    for _ in range(4):  # the rest of the roll
        kube.cluster.finish_terminating()
        kube.cluster.set_ready(names.selector("chat"))
        service = settle(kube, cluster, "chat")
    assert service.phase == "running" and service.ready_instances == 2
    assert not {r.name for r in rows("chat")} & old


def test_scaling_changes_the_deployments_replicas_and_nothing_else(kube, cluster):
    scaler = {"min": 1, "max": 4, "scaleStrategies": [{"metricName": "qps", "threshold": 5}]}
    deploy(spec(autoscaler=scaler))
    kube.cluster.auto_ready = True
    settle(kube, cluster, "chat")
    template = kube.apps.read_namespaced_deployment("chat", "default").spec.template
    update("chat", spec(instances=3, autoscaler=scaler))  # the spec's count, before a decision
    service = settle(kube, cluster, "chat")
    deployment = kube.apps.read_namespaced_deployment("chat", "default")
    assert deployment.spec.replicas == 3 and deployment.spec.template == template
    assert service.ready_instances == 3
    Service.objects.filter(name="chat").update(autoscale={"": {"replicas": 4}})  # scaled up
    service = settle(kube, cluster, "chat")
    assert kube.apps.read_namespaced_deployment("chat", "default").spec.replicas == 4
    assert service.ready_instances == 4 and len(rows("chat")) == 4


def test_pods_are_bounded_and_unprivileged_and_the_defaults_reserve_nothing(kube, cluster):
    data = spec(name="lean", instances=1)
    data["metadata"] = {"instance": 1, "gpu": 1}  # no cpu or memory: the operator's defaults
    deploy(data)
    settle(kube, cluster, "lean")
    (pod,) = kube.core.list_namespaced_pod("default", label_selector=names.selector("lean")).items
    assert pod.spec.node_name  # scheduled: requests of 0, not the limits copied into them
    engine, front = pod.spec.containers
    assert front.name == "front" and front.security_context.read_only_root_filesystem
    assert engine.resources.limits == {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "1"}
    assert engine.resources.requests == {"cpu": "0", "memory": "0", "nvidia.com/gpu": "1"}
    context = engine.security_context
    assert (context.allow_privilege_escalation, context.privileged) == (False, False)
    assert (context.capabilities.drop, context.capabilities.add) == (["ALL"], None)
    assert context.seccomp_profile.type == "RuntimeDefault"


def test_the_schedulers_reason_is_an_event_and_the_service_waits(kube, cluster):
    deploy(spec(name="huge", instances=1, gpu=16))
    service = settle(kube, cluster, "huge")
    assert service.phase == "pending"
    assert "Insufficient nvidia.com/gpu" in service.progress
    event = Event.objects.get(service__name="huge", reason="FailedScheduling")
    assert "0/3 nodes are available" in event.message and event.instance.startswith("huge-")
    settle(kube, cluster, "huge")  # later passes do not say it again
    assert Event.objects.filter(service__name="huge", reason="FailedScheduling").count() == 1


def test_an_image_that_cannot_be_pulled_fails_the_service_with_the_kubelets_words(kube, cluster):
    kube.cluster.fail_image("registry.example.com/nope:1", "manifest unknown")
    deploy(spec(name="bad", instances=1, image="registry.example.com/nope:1"))
    service = settle(kube, cluster, "bad")
    assert service.phase == "failed"
    assert service.last_error.startswith(f"{rows('bad')[0].name}: ErrImagePull") or (
        service.last_error.startswith(f"{rows('bad')[0].name}: ImagePullBackOff")
    ), service.last_error
    told = Event.objects.filter(service__name="bad", reason="Failed").values_list("message")
    assert any("manifest unknown" in message for (message,) in told), list(told)
    assert "Failed" in reasons("bad")


def test_a_rollout_past_its_deadline_is_reported_and_the_old_version_keeps_serving(
    kube, cluster, store
):
    deploy(spec())
    ready(kube, cluster, "chat")
    update("chat", spec(env=[{"name": "BROKEN", "value": "1"}]))
    settle(kube, cluster, "chat")  # the new pod never becomes ready
    kube.cluster.advance(KUBE.progress_deadline_s + 1)
    service = settle(kube, cluster, "chat")
    assert service.phase == "updating" and "rollout stalled" in service.last_error
    assert "RolloutStalled" in reasons("chat")
    assert len(published(store).services["chat"].instances) == 2  # the old pods serve
    # A rollback is the kept version applied again: the stuck pod goes.
    update("chat", spec(), note="rollback to 1")
    kube.cluster.auto_ready = True
    for _ in range(3):
        kube.cluster.finish_terminating()
        service = settle(kube, cluster, "chat")
    assert service.phase == "running" and service.last_error == ""


def test_deleting_a_service_removes_everything_it_owns_and_nothing_else(kube, cluster, store):
    foreign = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"},
               "metadata": {"name": "not-wharfs", "namespace": "default"}}  # fmt: skip
    kube.core.patch_namespaced_config_map(
        "not-wharfs", "default", foreign, field_manager="someone-else", _content_type=APPLY
    )
    deploy(spec())
    kube.cluster.auto_ready = True
    settle(kube, cluster, "chat")
    Service.objects.filter(name="chat").update(desired_state=DesiredState.DELETED)
    reconcile("chat", cluster, KUBE)
    kube.cluster.settle()
    reconcile("chat", cluster, KUBE)
    assert all(r.state == "draining" for r in rows("chat"))
    assert (
        "chat" not in published(store).services or not published(store).services["chat"].instances
    )
    kube.cluster.finish_terminating()
    kube.cluster.settle()
    assert reconcile("chat", cluster, KUBE) is None
    assert not Service.objects.filter(name="chat").exists()
    assert cluster.deployments(names.selector("chat")) == []
    assert cluster.pods(names.selector("chat")) == []
    assert kube.core.list_namespaced_secret("default").items == []
    assert cluster.read("ConfigMap", "not-wharfs") is not None  # not Wharf's: untouched


def test_logs_come_from_the_pod_and_nodes_from_the_cluster(kube, cluster):
    deploy(spec())
    kube.cluster.auto_ready = True
    settle(kube, cluster, "chat")
    pod = rows("chat")[0]
    kube.cluster.set_log(pod.name, "INFO engine ready\nINFO served 3 requests\n")
    assert PodLogs(lambda: cluster).logs(pod.name, 1).strip() == "INFO served 3 requests"
    assert nodes.sync(cluster, KUBE) == 3
    gpu = Node.objects.get(name=pod.node)
    assert len(gpu.cards) == 8 and gpu.runtime == "kubernetes"
    assert Instance.objects.get(name=pod.name).devices == "gpu:0"


def test_the_watch_asks_a_pass_of_the_service_a_pod_change_concerns(kube, cluster):
    assert watch_once(kube, cluster) == {"chat"}


def watch_once(kube, cluster: Cluster) -> set[str]:
    """Deploy a service with a watcher running; the services it asked passes of."""
    deploy(spec())
    asked: list[str] = []
    seen = threading.Event()

    def on_change(name: str) -> None:
        asked.append(name)
        seen.set()

    watcher = Watcher(on_change, lambda: ["chat"], get_cluster=lambda: cluster, watch_s=1)
    watcher.start()
    try:
        reconcile("chat", cluster, KUBE)
        kube.cluster.settle()
        assert seen.wait(10)
    finally:
        watcher.stop()
        watcher.join(5)
    return set(asked)


def test_the_role_allows_exactly_the_requests_the_runtime_makes(kube, cluster):
    """Every request of a whole cycle is one the Role (or the ClusterRole, for nodes) allows,
    and every verb the Role grants was used."""
    watch_once(kube, cluster)
    kube.cluster.auto_ready = True
    settle(kube, cluster, "chat")
    update("chat", spec(llm={"engine": "vllm", "model": "qwen"}))  # the model store: no claim
    service = settle(kube, cluster, "chat")  # nothing of it may run: its Deployment goes
    assert cluster.deployments(names.selector("chat")) == []
    assert service.phase == "failed" and service.last_error.startswith("llm.model: ")
    assert "CannotRunOnCluster" in reasons("chat")
    update("chat", spec())
    settle(kube, cluster, "chat")
    canary_cycle(kube, cluster)
    pod = rows("chat")[0]
    kube.cluster.set_log(pod.name, "hello\n")
    PodLogs(lambda: cluster).logs(pod.name)
    nodes.sync(cluster, KUBE)
    Service.objects.filter(name="chat").update(desired_state=DesiredState.DELETED)
    for _ in range(3):
        reconcile("chat", cluster, KUBE)
        kube.cluster.finish_terminating()
        kube.cluster.settle()
    reconcile("chat", cluster, KUBE)
    granted = set()
    for doc in yaml.safe_load_all(RBAC.read_text()):
        if doc["kind"] in ("Role", "ClusterRole"):
            for rule in doc["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        granted |= {(verb, group, resource) for verb in rule["verbs"]}
    made = set(kube.cluster.authorized)
    assert made <= granted, made - granted
    assert granted <= made, granted - made


def canary_cycle(kube, cluster: Cluster) -> None:
    """A canary release of chat started (its Deployment and Secret made) and aborted (both
    deleted)."""
    data = spec(env=[{"name": "V", "value": "2"}])
    service, spec_hash = Service.objects.get(name="chat"), parse_spec(data).spec_hash()
    release = Canary.objects.create(service=service, spec=seal(data), spec_hash=spec_hash,
                                    steps=[100])  # fmt: skip
    settle(kube, cluster, "chat")
    assert len(cluster.deployments(names.selector("chat"))) == 2
    finish(release, ABORTED, "by hand")
    settle(kube, cluster, "chat")
    assert len(cluster.deployments(names.selector("chat"))) == 1


def test_a_stopped_service_keeps_its_objects_with_no_pod(kube, cluster, store):
    deploy(spec())
    kube.cluster.auto_ready = True
    settle(kube, cluster, "chat")
    Service.objects.filter(name="chat").update(desired_state=DesiredState.STOPPED)
    service = settle(kube, cluster, "chat")
    assert service.phase == "stopping" and {r.state for r in rows("chat")} == {"draining"}
    kube.cluster.finish_terminating()
    service = settle(kube, cluster, "chat")
    assert (service.phase, rows("chat")) == ("stopped", [])
    assert kube.apps.read_namespaced_deployment("chat", "default").spec.replicas == 0
    Service.objects.filter(name="chat").update(desired_state=DesiredState.RUNNING)
    assert settle(kube, cluster, "chat").phase == "running"


def test_prefill_and_decode_are_a_deployment_each_routed_by_role(kube, cluster, store):
    data = json.loads((SPECS / "pd-vllm-gpu-nixl.json").read_text())
    deploy(data)
    kube.cluster.auto_ready = True
    with_store = replace(KUBE, model_store_claim="models")  # its model is a model-store name
    service = settle(kube, cluster, data["name"], conf=with_store)
    assert service.phase == "running", service.last_error
    deployments = {d["metadata"]["name"] for d in cluster.deployments(names.selector(data["name"]))}
    assert deployments == {names.deployment_name(data["name"], r) for r in ("prefill", "decode")}
    routed = published(store).services[data["name"]].instances
    assert {(i.role, i.key) for i in routed} == {
        (role, names.engine_key_name(data["name"], role)) for role in ("prefill", "decode")
    }


def groups(table: dict) -> dict[str, list[dict]]:
    return {g["group_id"]: g["server_list"] for g in table["server_group_list"]}


def test_rank_tables_list_the_scheduled_pods_with_the_device_plugins_npus(kube, cluster):
    data = json.loads((SPECS / "pd-vllm-ascend-ranktable.json").read_text())
    name, with_store = data["name"], replace(KUBE, model_store_claim="models")
    deploy(data)
    settle(kube, cluster, name, conf=with_store)
    pods = {p.metadata.labels[names.LABEL_ROLE]: p for p in kube.core.list_namespaced_pod(
        "default", label_selector=names.selector(name)).items}  # fmt: skip
    tables = kube.core.read_namespaced_config_map(f"{name}-ranktable", "default").data
    assert sorted(tables) == sorted(["global.json", *(f"{p.metadata.name}.json"
                                                      for p in pods.values())])  # fmt: skip
    table = json.loads(tables["global.json"])
    assert table["status"] == "completed"
    for group, role in (("1", "prefill"), ("2", "decode")):
        (server,) = groups(table)[group]
        plugin = json.loads(pods[role].metadata.annotations[
            "ascend.kubectl.kubernetes.io/ascend-910-configuration"])  # fmt: skip
        assert server["server_ip"] == pods[role].status.pod_ip  # the pod's own address
        assert [(d["device_id"], d["device_ip"]) for d in server["device"]] == [
            (d["device_id"], d["device_ip"]) for d in plugin["devices"]
        ]
        local = json.loads(tables[f"{pods[role].metadata.name}.json"])
        assert local["server_list"] == [server]
    # A replacement pod: the tables list it, with its cards, and no longer the pod it replaced.
    old = pods["prefill"].metadata.name
    kube.core.delete_namespaced_pod(old, "default")
    kube.cluster.settle()
    kube.cluster.finish_terminating(old)
    settle(kube, cluster, name, conf=with_store)
    tables = kube.core.read_namespaced_config_map(f"{name}-ranktable", "default").data
    (new,) = [p for p in kube.core.list_namespaced_pod(
        "default", label_selector=names.selector(name, "prefill")).items]  # fmt: skip
    assert new.metadata.name != old and f"{old}.json" not in tables
    (server,) = groups(json.loads(tables["global.json"]))["1"]
    assert server["server_ip"] == new.status.pod_ip and f"{new.metadata.name}.json" in tables


def test_rank_tables_wait_for_the_device_plugins_annotation(start_kube, store, settings):
    settings.WHARF_RUNTIME = "kubernetes"
    kube = start_kube(npu_annotations=False)  # a device plugin that writes no annotation
    cluster = Cluster(kube.api_client, "default")
    data = json.loads((SPECS / "pd-vllm-ascend-ranktable.json").read_text())
    deploy(data)
    service = settle(kube, cluster, data["name"], conf=replace(KUBE, model_store_claim="models"))
    tables = kube.core.read_namespaced_config_map(f"{data['name']}-ranktable", "default").data
    assert json.loads(tables["global.json"])["status"] == "initializing"
    assert list(tables) == ["global.json"]
    assert "rank tables: pod " in service.progress
    assert "has no NPU addresses yet" in service.progress
