"""Pods and Deployments as Wharf's instances and rollouts (workers.kube.observe): tables."""

from __future__ import annotations

import pytest

from contracts.kube import names
from workers.kube import observe

UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def pod(
    *,
    phase: str = "Running",
    ready: bool = False,
    scheduled: str | None = "True",
    waiting: dict | None = None,
    last: dict | None = None,
    restarts: int = 0,
    deleting: bool = False,
    ip: str | None = "10.1.2.3",
    role: str = "",
) -> dict:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if scheduled is not None:
        conditions.append({"type": "PodScheduled", "status": scheduled, "reason": "Unschedulable",
                           "message": UNSCHEDULABLE})  # fmt: skip
    container: dict = {"name": "engine", "image": "vllm/vllm-openai:v0.32.0",
                       "restartCount": restarts, "state": {}}  # fmt: skip
    if waiting:
        container["state"] = {"waiting": waiting}
    if last:
        container["lastState"] = {"terminated": last}
    meta: dict = {
        "name": "demo-6d5f-abcde",
        "labels": {**names.labels("demo", role, "0123abcd"), "pod-template-hash": "6d5f"},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    status: dict = {"phase": phase, "conditions": conditions}
    if scheduled == "True":
        status["containerStatuses"] = [container]
    if ip:
        status["podIP"] = ip
    ports = [{"name": "http", "containerPort": 8000}, {"name": "kv", "containerPort": 5600}]
    spec = {"nodeName": "gpu-1" if scheduled == "True" else None,
            "containers": [{"name": "engine", "ports": ports}]}  # fmt: skip
    return {"metadata": meta, "spec": spec, "status": status}


def initializing(*done: str, waiting: dict | None = None, last: dict | None = None) -> dict:
    """A pod whose init containers `done` have completed and the next runs (or waits)."""
    found = pod(phase="Pending", waiting={"reason": "PodInitializing"})
    statuses = [{"name": n, "state": {"terminated": {"exitCode": 0}}} for n in done[:-1]]
    state = {"waiting": waiting} if waiting else {"running": {}}
    current = {"name": done[-1] if done else "stage-0", "state": state}
    if last:
        current["lastState"] = {"terminated": last}
    found["status"]["initContainerStatuses"] = [*statuses, current]
    return found


STATES = [
    ("ready", pod(ready=True), False, "ready", ""),
    ("starting", pod(), False, "starting", "readiness"),
    ("ready before, failing now", pod(), True, "unhealthy", "readiness probe failing"),
    ("unschedulable", pod(phase="Pending", scheduled="False", ip=None), False, "creating",
     f"not scheduled: {UNSCHEDULABLE}"),
    ("pulling", pod(phase="Pending", waiting={"reason": "ContainerCreating"}), False,
     "creating", "pulling"),
    ("image missing", pod(waiting={"reason": "ErrImagePull", "message": "not found"}), False,
     "failed", "ErrImagePull: not found"),
    ("image back-off", pod(phase="Pending", waiting={"reason": "ImagePullBackOff"}), False,
     "failed", "ImagePullBackOff"),
    ("bad config", pod(waiting={"reason": "CreateContainerConfigError", "message": "no secret"}),
     False, "failed", "no secret"),
    ("crash loop", pod(waiting={"reason": "CrashLoopBackOff"}, restarts=3,
                       last={"exitCode": 137, "reason": "OOMKilled"}), True, "backoff",
     "exited with code 137 (OOMKilled)"),
    ("evicted", pod(phase="Failed", ready=False), True, "backoff", "the pod ended"),
    ("terminating, even if ready", pod(ready=True, deleting=True), True, "draining", "terminating"),
    ("staging", initializing("stage-0"), False, "creating", "staging the model"),
    ("waiting for rank tables", initializing("stage-0", "rank-tables"), False, "creating",
     "waiting for the rank tables to list the pod"),
    ("stager image missing", initializing(waiting={"reason": "ErrImagePull",
                                                   "message": "wharf:9 not found"}),
     False, "failed", "ErrImagePull: wharf:9 not found"),
    ("staging keeps failing", initializing(waiting={"reason": "CrashLoopBackOff"},
                                           last={"exitCode": 1, "reason": "Error"}),
     False, "backoff", "exited with code 1 (Error)"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "obj", "was_ready", "state", "message"), STATES,
                         ids=[s[0] for s in STATES])  # fmt: skip
def test_a_pod_is_an_instance_in_the_state_its_status_says(
    case: str, obj: dict, was_ready: bool, state: str, message: str
) -> None:
    seen = observe.instance(obj, was_ready=was_ready)
    assert seen.state == state
    assert message in seen.message


def test_an_instance_carries_the_pods_name_role_hash_node_url_and_restarts() -> None:
    seen = observe.instance(pod(ready=True, role="decode", restarts=2))
    assert (seen.name, seen.role, seen.spec_hash, seen.node) == (
        "demo-6d5f-abcde", "decode", "0123abcd", "gpu-1",
    )  # fmt: skip
    assert seen.url == "http://10.1.2.3:8000"  # the port named http, not the KV side channel
    assert seen.restarts == 2


def test_a_pod_without_an_address_has_no_url_to_route_to() -> None:
    assert observe.instance(pod(phase="Pending", scheduled="False", ip=None)).url == ""


def deployment(*, generation=2, observed=2, replicas=2, updated=2, ready=2, progressing=None):
    status = {"observedGeneration": observed, "updatedReplicas": updated, "readyReplicas": ready}
    if progressing:
        status["conditions"] = [{"type": "Progressing", "status": "False",
                                 "reason": progressing, "message": "ReplicaSet \"demo-6d5f\" "
                                 "has timed out progressing."}]  # fmt: skip
    return {
        "metadata": {"name": "demo-prefill", "generation": generation,
                     "labels": names.labels("demo", "prefill")},
        "spec": {"replicas": replicas},
        "status": status,
    }  # fmt: skip


ROLLOUTS = [
    ("done", deployment(), (True, 2, 2, 2, "")),
    ("not seen yet", deployment(observed=1), (False, 2, 2, 2, "")),
    ("rolling", deployment(updated=1, ready=1), (True, 2, 1, 1, "")),
    ("stalled", deployment(updated=1, progressing="ProgressDeadlineExceeded"),
     (True, 2, 1, 2, 'ReplicaSet "demo-6d5f" has timed out progressing.')),
    ("progressing is no stall", deployment(progressing="ReplicaSetUpdated"), (True, 2, 2, 2, "")),
]  # fmt: skip


@pytest.mark.parametrize(("case", "obj", "expected"), ROLLOUTS, ids=[r[0] for r in ROLLOUTS])
def test_a_deployments_status_is_its_rollout(case: str, obj: dict, expected: tuple) -> None:
    seen = observe.rollout(obj)
    assert seen.role == "prefill"
    assert (seen.current, seen.desired, seen.updated, seen.ready, seen.stalled) == expected


def test_only_warnings_are_told_oldest_first() -> None:
    events = [
        {"type": "Normal", "reason": "Scheduled", "message": "assigned", "lastTimestamp": "1",
         "involvedObject": {"name": "p"}},
        {"type": "Warning", "reason": "Failed", "message": "Failed to pull image",
         "lastTimestamp": "3", "involvedObject": {"name": "p"}},
        {"type": "Warning", "reason": "FailedScheduling", "message": "0/3 nodes",
         "lastTimestamp": "2", "involvedObject": {"name": "p"}},
    ]  # fmt: skip
    assert observe.warnings(events) == [
        ("FailedScheduling", "0/3 nodes", "p"), ("Failed", "Failed to pull image", "p"),
    ]  # fmt: skip
