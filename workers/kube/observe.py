"""What the cluster says, as Wharf's instances and rollouts: pure functions of the objects.

A pod of Wharf's Deployments is an instance: its name, role, spec hash and track (a canary
release's pods: contracts.kube.names) from its labels, its node, the URL the gateway calls (pod
IP and the container's `http` port; `https://<IP dashed>.<domain>:<port>` where the pod's
annotation `wharf.io/engine-tls-domain` says its front serves the operator's certificate for
that DNS name, contracts.kube.front), and a state from its phase, conditions and container
statuses:

| the pod | instance state |
|---|---|
| being deleted (`deletionTimestamp`) | `draining`: out of routing at once |
| not scheduled yet (`PodScheduled` false) | `creating`, with the scheduler's reason |
| an image cannot be pulled, or its config is wrong | `failed`: the spec must change |
| a container exited and waits to restart (`CrashLoopBackOff`) | `backoff`, with the exit |
| an init container runs (staging, rank tables) | `creating`, saying which |
| `Ready` | `ready`: routed |
| running, not ready, ready before | `unhealthy`: out of routing |
| otherwise | `starting` |
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.engine_tls import instance_url
from contracts.kube import names
from contracts.kube.front import ANNOTATION_TLS_DOMAIN

# Container waiting reasons a restart does not cure: the spec (image, config) must change.
FATAL_WAITING = frozenset({
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
    "CreateContainerConfigError", "CreateContainerError",
})  # fmt: skip
PORT_NAME = "http"
# What a running init container of Wharf's does (contracts.kube.pod_template), by name.
_INIT = {
    "stage": "staging the model from object storage",
    "rank": "waiting for the rank tables to list the pod",
}


@dataclass(frozen=True)
class PodInstance:
    name: str
    role: str
    spec_hash: str
    node: str
    url: str
    state: str
    restarts: int
    message: str
    track: str = ""  # "canary": a pod of a canary release's Deployment


@dataclass(frozen=True)
class Rollout:
    """One Deployment's progress, from its status."""

    role: str
    desired: int
    updated: int
    ready: int
    stalled: str  # Kubernetes' message when the rollout passed its progress deadline
    current: bool  # the controller has seen the newest spec (observedGeneration)


def _condition(obj: dict, kind: str) -> dict:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return {}


def _port(pod: dict) -> int | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == PORT_NAME:
                return int(port["containerPort"])
    return None


def url(meta: dict, ip: str, port: int) -> str:
    """Where the gateways call the pod: its IP, or over TLS the DNS name its certificate
    covers, `10-1-2-3.<namespace>.pod.<cluster domain>` (IPv6: each `:` a `-`), which the
    cluster's DNS answers with that IP."""
    domain = (meta.get("annotations") or {}).get(ANNOTATION_TLS_DOMAIN, "")
    if not domain:
        return instance_url(f"[{ip}]" if ":" in ip else ip, port, tls=False)
    return instance_url(f"{ip.replace('.', '-').replace(':', '-')}.{domain}", port, tls=True)


def _exit(status: dict) -> str:
    last = (status.get("lastState") or {}).get("terminated") or {}
    if not last:
        return ""
    reason = f" ({last['reason']})" if last.get("reason") else ""
    return f"exited with code {last.get('exitCode')}{reason}"


def instance(pod: dict, was_ready: bool = False) -> PodInstance:
    """The instance `pod` is; `was_ready`: Wharf saw it ready before (a readiness failure
    since is `unhealthy`, not `starting`)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    labels = meta.get("labels") or {}
    containers = status.get("containerStatuses") or []
    restarts = sum(int(c.get("restartCount") or 0) for c in containers)
    ip, port = status.get("podIP"), _port(pod)
    state, message = _state(meta, status, containers, was_ready)
    return PodInstance(
        name=meta.get("name", ""), role=labels.get(names.LABEL_ROLE, ""),
        spec_hash=labels.get(names.LABEL_SPEC_HASH, ""),
        node=(pod.get("spec") or {}).get("nodeName") or "",
        url=url(meta, ip, port) if ip and port else "", state=state,
        restarts=restarts, message=message, track=labels.get(names.LABEL_TRACK, ""),
    )  # fmt: skip


def _state(meta: dict, status: dict, containers: list[dict], was_ready: bool) -> tuple[str, str]:
    if meta.get("deletionTimestamp"):
        return "draining", "terminating: out of routing, stopping once its grace ends"
    scheduled = _condition({"status": status}, "PodScheduled")
    if scheduled.get("status") == "False":
        return "creating", f"not scheduled: {scheduled.get('message') or scheduled.get('reason')}"
    init = status.get("initContainerStatuses") or []
    for container in init + containers:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason", "")
        if reason in FATAL_WAITING:
            return "failed", f"{reason}: {waiting.get('message') or container.get('image', '')}"
        if reason == "CrashLoopBackOff":
            return "backoff", _exit(container) or "restarting after a crash"
    if status.get("phase") in ("Failed", "Succeeded"):
        return "backoff", status.get("message") or status.get("reason") or "the pod ended"
    if _condition({"status": status}, "Ready").get("status") == "True":
        return "ready", ""
    if was_ready:
        return "unhealthy", "readiness probe failing: out of routing"
    running = [c["name"] for c in init if "running" in (c.get("state") or {})]
    if running:
        return "creating", _INIT.get(running[0].split("-")[0], f"init container {running[0]}")
    if not containers or status.get("phase") == "Pending":
        return "creating", "pulling the image and starting the pod"
    return "starting", "waiting for the engine to pass its readiness probe"


def rollout(deployment: dict) -> Rollout:
    meta, spec = deployment.get("metadata") or {}, deployment.get("spec") or {}
    status = deployment.get("status") or {}
    progressing = _condition(deployment, "Progressing")
    stalled = ""
    if progressing.get("reason") == "ProgressDeadlineExceeded":
        stalled = progressing.get("message") or "the rollout passed its progress deadline"
    return Rollout(
        role=(meta.get("labels") or {}).get(names.LABEL_ROLE, ""),
        desired=int(spec.get("replicas") or 0), updated=int(status.get("updatedReplicas") or 0),
        ready=int(status.get("readyReplicas") or 0), stalled=stalled,
        current=int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0),
    )  # fmt: skip


def warnings(events: list[dict]) -> list[tuple[str, str, str]]:
    """(reason, message, object name) of the Warning events about Wharf's objects, oldest
    first: the scheduler's FailedScheduling, the kubelet's image pull failures, back-offs."""
    found = [e for e in events if e.get("type") == "Warning"]
    found.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return [
        (e.get("reason", ""), e.get("message", ""), (e.get("involvedObject") or {}).get("name", ""))
        for e in found
    ]
