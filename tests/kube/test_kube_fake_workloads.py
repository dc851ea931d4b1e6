"""The fake cluster's controllers, seen through the official client: Deployments and their
rollouts, the scheduler, the kubelets (readiness, image pulls, crashes, graceful deletion,
logs) and the nodes."""

from __future__ import annotations

import json
import re

import kubernetes
import pytest
from kube_fake_objects import APPLY, deployment, names
from kubernetes.client import ApiException

SAFE = "[bcdfghjklmnpqrstvwxz2456789]"


def pods(kube, selector: str = "app=svc") -> list:
    return sorted(
        kube.core.list_namespaced_pod("default", label_selector=selector).items,
        key=lambda pod: pod.metadata.name,
    )


def events_of(kube, name: str) -> list:
    field = f"involvedObject.name={name}"
    return kube.core.list_namespaced_event("default", field_selector=field).items


def test_a_deployment_of_two_replicas_gets_two_running_pods_named_as_kubernetes_names_them(kube):
    kube.apps.patch_namespaced_deployment("svc", "default", deployment(replicas=2), **APPLY)
    kube.cluster.settle()
    running = pods(kube)
    status = kube.apps.read_namespaced_deployment("svc", "default").status
    assert len(running) == 2
    for pod in running:
        template_hash = pod.metadata.labels["pod-template-hash"]
        assert re.fullmatch(f"svc-{SAFE}{{9,10}}-{SAFE}{{5}}", pod.metadata.name)
        assert pod.metadata.name.startswith(f"svc-{template_hash}-")
        assert pod.metadata.labels["app"] == "svc"
        owner = pod.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.controller) == (
            "ReplicaSet",
            f"svc-{template_hash}",
            True,
        )
        assert pod.spec.node_name and re.fullmatch(r"10\.244\.\d+\.\d+", pod.status.pod_ip)
        assert pod.status.phase == "Running"
        assert pod.spec.containers[0].resources.requests["nvidia.com/gpu"] == "1"  # from limits
        assert pod.status.container_statuses[0].ready is False  # its probe has not passed
    assert (status.replicas, status.updated_replicas, status.ready_replicas) == (2, 2, None)
    assert status.unavailable_replicas == 2

    kube.cluster.set_ready("app=svc")
    kube.cluster.settle()
    status = kube.apps.read_namespaced_deployment("svc", "default").status
    conditions = {c.type: (c.status, c.reason) for c in status.conditions}
    assert (status.ready_replicas, status.available_replicas, status.observed_generation) == (
        2,
        2,
        1,
    )
    assert conditions == {
        "Available": ("True", "MinimumReplicasAvailable"),
        "Progressing": ("True", "NewReplicaSetAvailable"),
    }


def test_a_template_change_rolls_one_pod_at_a_time_as_new_pods_become_ready(kube):
    kube.apps.patch_namespaced_deployment("svc", "default", deployment(replicas=2), **APPLY)
    kube.cluster.settle()
    kube.cluster.set_ready("app=svc")
    kube.cluster.settle()
    old_hash = pods(kube)[0].metadata.labels["pod-template-hash"]
    kube.apps.patch_namespaced_deployment(
        "svc", "default", deployment(replicas=2, image="vllm/vllm-openai:v0.12.0"), **APPLY
    )
    history = []
    for _ in range(4):
        kube.cluster.settle()
        current = [p for p in pods(kube) if not p.metadata.deletion_timestamp]
        new = [p for p in current if p.metadata.labels["pod-template-hash"] != old_hash]
        history.append((len(current) - len(new), len(new)))
        for pod in new:
            kube.cluster.set_ready(pod.metadata.name)
        kube.cluster.finish_terminating()
    # maxSurge 1: one new pod at a time; maxUnavailable 0: an old pod goes once a new one is ready
    assert history == [(2, 1), (1, 2), (0, 2), (0, 2)]
    status = kube.apps.read_namespaced_deployment("svc", "default").status
    assert (status.updated_replicas, status.available_replicas, status.observed_generation) == (
        2,
        2,
        2,
    )


def test_a_stalled_rollout_reports_progress_deadline_exceeded(kube):
    body = deployment(replicas=1)
    body["spec"]["progressDeadlineSeconds"] = 120
    kube.apps.patch_namespaced_deployment("svc", "default", body, **APPLY)
    kube.cluster.settle()
    kube.cluster.advance(121)
    kube.cluster.settle()
    progressing = next(
        c
        for c in kube.apps.read_namespaced_deployment("svc", "default").status.conditions
        if c.type == "Progressing"
    )
    template_hash = pods(kube)[0].metadata.labels["pod-template-hash"]
    assert (progressing.status, progressing.reason) == ("False", "ProgressDeadlineExceeded")
    assert progressing.message == f'ReplicaSet "svc-{template_hash}" has timed out progressing.'


def test_a_pod_asking_more_gpus_than_any_node_has_stays_pending_with_the_schedulers_reason(kube):
    kube.apps.patch_namespaced_deployment(
        "svc", "default", deployment(replicas=1, gpus=16), **APPLY
    )
    kube.cluster.settle()
    (pod,) = pods(kube)
    (event,) = [e for e in events_of(kube, pod.metadata.name) if e.reason == "FailedScheduling"]
    message = (
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
        "available: 3 No preemption victims found for incoming pod.."
    )
    scheduled = pod.status.conditions[0]
    assert (pod.status.phase, pod.spec.node_name) == ("Pending", None)
    assert (scheduled.type, scheduled.status, scheduled.reason) == (
        "PodScheduled",
        "False",
        "Unschedulable",
    )
    assert scheduled.message == event.message == message
    assert (event.type, event.involved_object.kind, event.reporting_component) == (
        "Warning",
        "Pod",
        "default-scheduler",
    )
    since = kube.core.list_namespaced_event("default").metadata.resource_version
    kube.cluster.advance(300)  # the scheduler tries again
    kube.cluster.settle()
    (event,) = [e for e in events_of(kube, pod.metadata.name) if e.reason == "FailedScheduling"]
    stream = kubernetes.watch.Watch().stream(
        kube.core.list_namespaced_event,
        "default",
        field_selector=f"involvedObject.name={pod.metadata.name}",
        resource_version=since,
        timeout_seconds=1,
    )
    assert [(e["type"], e["object"].reason) for e in stream] == [("MODIFIED", "FailedScheduling")]
    assert event.count == 2 and event.series.count == 2


def test_an_image_that_fails_to_pull_shows_err_image_pull_then_image_pull_backoff(kube):
    kube.cluster.fail_image("vllm/vllm-openai:missing")
    since = kube.core.list_namespaced_pod("default").metadata.resource_version
    kube.apps.patch_namespaced_deployment(
        "svc", "default", deployment(replicas=1, image="vllm/vllm-openai:missing"), **APPLY
    )
    kube.cluster.settle()
    stream = kubernetes.watch.Watch().stream(
        kube.core.list_namespaced_pod, "default", resource_version=since, timeout_seconds=1
    )
    states = [
        event["object"].status.container_statuses[0].state.waiting
        for event in stream
        if event["object"].status.container_statuses
    ]
    (pod,) = pods(kube)
    failed = [e for e in events_of(kube, pod.metadata.name) if e.reason == "Failed"]
    ref = "docker.io/vllm/vllm-openai:missing"
    assert [state.reason for state in states] == ["ErrImagePull", "ImagePullBackOff"]
    assert states[0].message.startswith(
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}"'
    )
    assert states[1].message.startswith(
        'Back-off pulling image "vllm/vllm-openai:missing": ErrImagePull: rpc error'
    )
    assert pod.status.phase == "Pending"
    assert failed[0].message.startswith('Failed to pull image "vllm/vllm-openai:missing": rpc')
    assert {e.message for e in failed[1:]} == {"Error: ErrImagePull", "Error: ImagePullBackOff"}
    assert failed[0].type == "Warning" and failed[0].source.component == "kubelet"

    kube.cluster.advance(10)  # the back-off passes: the kubelet pulls again, and fails again
    kube.cluster.settle()
    again = [e for e in events_of(kube, pod.metadata.name) if e.message == failed[0].message]
    assert again[0].count == 2


def test_a_fixed_image_is_pulled_once_the_back_off_has_passed(kube):
    kube.cluster.fail_image("vllm/vllm-openai:late")
    kube.apps.patch_namespaced_deployment(
        "svc", "default", deployment(replicas=1, image="vllm/vllm-openai:late"), **APPLY
    )
    kube.cluster.settle()
    kube.cluster.allow_image("vllm/vllm-openai:late")
    kube.cluster.settle()
    waiting = pods(kube)[0].status.container_statuses[0].state.waiting
    kube.cluster.advance(10)
    kube.cluster.settle()
    (pod,) = pods(kube)
    assert waiting.reason == "ImagePullBackOff"
    assert pod.status.phase == "Running" and pod.status.container_statuses[0].state.running


def test_a_crash_counts_a_restart_and_keeps_the_last_state(kube):
    kube.apps.patch_namespaced_deployment("svc", "default", deployment(replicas=1), **APPLY)
    kube.cluster.settle()
    name = pods(kube)[0].metadata.name
    kube.cluster.crash(name, exit_code=137, reason="OOMKilled")
    once = pods(kube)[0].status.container_statuses[0]
    kube.cluster.crash(name, exit_code=1, reason="Error")
    looping = pods(kube)[0].status.container_statuses[0]
    kube.cluster.advance(10)
    kube.cluster.settle()
    again = pods(kube)[0].status.container_statuses[0]
    assert once.restart_count == 1 and once.state.running is not None
    assert (once.last_state.terminated.exit_code, once.last_state.terminated.reason) == (
        137,
        "OOMKilled",
    )
    assert looping.state.waiting.reason == "CrashLoopBackOff" and looping.restart_count == 1
    assert (looping.last_state.terminated.exit_code, looping.last_state.terminated.reason) == (
        1,
        "Error",
    )
    assert again.restart_count == 2 and again.state.running is not None


def test_a_terminating_pod_keeps_its_deletion_timestamp_until_its_grace_passes(kube):
    kube.apps.patch_namespaced_deployment("svc", "default", deployment(replicas=1), **APPLY)
    kube.cluster.settle()
    name = pods(kube)[0].metadata.name
    since = kube.core.list_namespaced_pod("default").metadata.resource_version
    deleted = kube.core.delete_namespaced_pod(name, "default")
    terminating = kube.core.read_namespaced_pod(name, "default")
    kube.cluster.advance(59)
    kube.cluster.settle()
    still = kube.core.read_namespaced_pod(name, "default")
    kube.cluster.advance(1)
    kube.cluster.settle()
    stream = kubernetes.watch.Watch().stream(
        kube.core.list_namespaced_pod,
        "default",
        field_selector=f"metadata.name={name}",
        resource_version=since,
        timeout_seconds=1,
    )
    seen = [event["type"] for event in stream]
    assert deleted.metadata.deletion_timestamp is not None  # the pod comes back, not a Status
    assert terminating.metadata.deletion_grace_period_seconds == 60
    assert still.metadata.deletion_timestamp == terminating.metadata.deletion_timestamp
    assert seen[0] == "MODIFIED" and seen[-1] == "DELETED" and "ADDED" not in seen
    with pytest.raises(ApiException) as raised:
        kube.core.read_namespaced_pod(name, "default")
    assert raised.value.status == 404
    assert len(pods(kube)) == 1  # the ReplicaSet replaced it


def test_pod_logs_are_the_tests_and_honour_tail_lines(kube):
    kube.apps.patch_namespaced_deployment("svc", "default", deployment(replicas=1), **APPLY)
    kube.cluster.settle()
    name = pods(kube)[0].metadata.name
    kube.cluster.set_log(name, "starting\nloading weights\nready\n")
    # Client 36 turns a preloaded log into "b'...'" (kubernetes-client/python#2596): read it raw.
    raw = kube.core.read_namespaced_pod_log(
        name, "default", tail_lines=2, container="engine", _preload_content=False
    )
    tail = raw.data.decode()
    with pytest.raises(ApiException) as raised:
        kube.core.read_namespaced_pod_log(name, "default", container="sidecar")
    assert tail == "loading weights\nready\n"
    assert raised.value.status == 400
    assert (
        json.loads(raised.value.body)["message"] == f"container sidecar is not valid for pod {name}"
    )


def test_nodes_list_their_allocatable_cards(kube):
    nodes = {node.metadata.name: node.status.allocatable for node in kube.core.list_node().items}
    assert names(kube.core.list_node().items) == ["gpu-node-1", "gpu-node-2", "npu-node-1"]
    assert nodes["gpu-node-1"]["nvidia.com/gpu"] == "8"
    assert nodes["npu-node-1"]["huawei.com/Ascend910"] == "8"
    assert nodes["gpu-node-1"]["memory"] == "512Gi" and nodes["gpu-node-1"]["pods"] == "110"


def test_pods_fill_nodes_until_their_cards_run_out(start_kube):
    kube = start_kube(nodes={"only": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": 2}})
    kube.apps.patch_namespaced_deployment("svc", "default", deployment(replicas=3), **APPLY)
    kube.cluster.settle()
    placed = [pod.spec.node_name for pod in pods(kube) if pod.spec.node_name]
    pending = [pod for pod in pods(kube) if pod.spec.node_name is None]
    assert (placed, len(pending)) == (["only", "only"], 1)
    assert (
        pending[0]
        .status.conditions[0]
        .message.startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    )


def test_scaling_down_terminates_the_extra_pod(kube):
    kube.apps.patch_namespaced_deployment("svc", "default", deployment(replicas=2), **APPLY)
    kube.cluster.settle()
    kube.apps.patch_namespaced_deployment("svc", "default", deployment(replicas=1), **APPLY)
    kube.cluster.settle()
    terminating = [pod for pod in pods(kube) if pod.metadata.deletion_timestamp]
    kube.cluster.finish_terminating()
    assert len(terminating) == 1 and len(pods(kube)) == 1
    assert kube.apps.read_namespaced_deployment("svc", "default").status.replicas == 1


def test_a_recreate_rollout_starts_new_pods_only_once_the_old_ones_are_gone(kube):
    body = deployment(replicas=2)
    body["spec"]["strategy"] = {"type": "Recreate"}
    kube.apps.patch_namespaced_deployment("svc", "default", body, **APPLY)
    kube.cluster.settle()
    body["spec"]["template"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.12.0"
    kube.apps.patch_namespaced_deployment("svc", "default", body, **APPLY)
    kube.cluster.settle()
    during = pods(kube)
    kube.cluster.finish_terminating()
    kube.cluster.settle()
    after = pods(kube)
    assert [bool(pod.metadata.deletion_timestamp) for pod in during] == [True, True]
    images = {pod.spec.containers[0].image for pod in after}
    assert len(after) == 2 and images == {"vllm/vllm-openai:v0.12.0"}


def test_with_auto_settle_and_auto_ready_an_apply_leaves_an_available_deployment(start_kube):
    kube = start_kube(auto_settle=True, auto_ready=True)
    kube.apps.patch_namespaced_deployment("svc", "default", deployment(replicas=2), **APPLY)
    status = kube.apps.read_namespaced_deployment("svc", "default").status
    assert (status.ready_replicas, status.available_replicas) == (2, 2)
    assert all(pod.status.container_statuses[0].ready for pod in pods(kube))
