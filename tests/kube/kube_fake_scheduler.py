"""The scheduler: binds each pending pod to a node that has room for its requests.

A node has room when its allocatable minus the requests of the pods bound to it (terminating
ones included: they hold their resources until they are gone) covers the pod's requests, the
cards included (their requests equal their limits). Among nodes with room the least allocated
wins (the default scoring), ties by name. A pod with no room anywhere stays Pending with
PodScheduled False and a FailedScheduling event worded as the scheduler words it, preemption
included; it is tried again when room may have appeared (a node added, a pod gone) or five
minutes later (podMaxInUnschedulablePodsDuration), and every failed try bumps the event.
Supported filters: nodeSelector, spec.unschedulable, resources, pod count. No taints.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from decimal import Decimal

from kube_fake_events import SCHEDULER, Recorder
from kube_fake_selectors import parse_quantity
from kube_fake_store import KINDS, Store

PODS, NODES = KINDS["pods"], KINDS["nodes"]
RETRY = timedelta(minutes=5)
_UNRESOLVABLE = ("node(s) didn't match Pod's node affinity/selector", "node(s) were unschedulable")

Amounts = dict[str, Decimal]


def pod_requests(spec: dict) -> Amounts:
    """What a pod asks for: its containers' requests summed, or its largest init container's
    when larger, and one pod."""
    total: Amounts = {}
    for container in spec.get("containers") or []:
        for name, amount in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, Decimal(0)) + parse_quantity(amount)[0]
    for container in spec.get("initContainers") or []:
        for name, amount in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total.get(name, Decimal(0)), parse_quantity(amount)[0])
    total["pods"] = Decimal(1)
    return total


def is_terminal(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class Scheduler:
    def __init__(self, store: Store, recorder: Recorder) -> None:
        self.store, self.recorder = store, recorder
        self._tried: dict[str, tuple[object, dict[str, Amounts]]] = {}  # uid -> (when, free)

    def step(self) -> None:
        nodes = self.store.items(NODES)
        pods = self.store.items(PODS)
        free = {node["metadata"]["name"]: self._allocatable(node) for node in nodes}
        for pod in pods:
            bound = pod["spec"].get("nodeName")
            if bound in free and not is_terminal(pod):
                for name, amount in pod_requests(pod["spec"]).items():
                    free[bound][name] = free[bound].get(name, Decimal(0)) - amount
        pending = [
            pod
            for pod in pods
            if not pod["spec"].get("nodeName")
            and not pod["metadata"].get("deletionTimestamp")
            and pod["spec"].get("schedulerName", SCHEDULER) == SCHEDULER
        ]
        pending.sort(
            key=lambda pod: (pod["metadata"]["creationTimestamp"], pod["metadata"]["name"])
        )
        by_name = {node["metadata"]["name"]: node for node in nodes}
        for pod in pending:
            if self._wait(pod, free):
                continue
            self._schedule(pod, by_name, free)

    @staticmethod
    def _allocatable(node: dict) -> Amounts:
        allocatable = node["status"].get("allocatable") or {}
        return {name: parse_quantity(amount)[0] for name, amount in allocatable.items()}

    def _wait(self, pod: dict, free: dict[str, Amounts]) -> bool:
        """Whether an unschedulable pod waits: nothing freed since its last try, and not yet
        five minutes."""
        tried = self._tried.get(pod["metadata"]["uid"])
        if tried is None:
            return False
        when, then = tried
        if self.store.clock.now - when >= RETRY:  # type: ignore[operator]
            return False
        for node, amounts in free.items():
            if node not in then or any(
                amount > then[node].get(r, 0) for r, amount in amounts.items()
            ):
                return False
        return True

    def _reasons(self, pod: dict, node: dict, free: Amounts) -> list[str]:
        if node.get("spec", {}).get("unschedulable"):
            return [_UNRESOLVABLE[1]]
        labels = node["metadata"].get("labels") or {}
        selector = pod["spec"].get("nodeSelector") or {}
        if any(labels.get(key) != value for key, value in selector.items()):
            return [_UNRESOLVABLE[0]]
        reasons = []
        for name, amount in sorted(pod_requests(pod["spec"]).items()):
            if amount > 0 and amount > free.get(name, Decimal(0)):
                reasons.append("Too many pods" if name == "pods" else f"Insufficient {name}")
        return reasons

    def _schedule(self, pod: dict, nodes: dict[str, dict], free: dict[str, Amounts]) -> None:
        reasons = {name: self._reasons(pod, node, free[name]) for name, node in nodes.items()}
        fits = [name for name, found in reasons.items() if not found]
        if fits:
            chosen = min(fits, key=lambda name: (-self._score(nodes[name], free[name]), name))
            for name, amount in pod_requests(pod["spec"]).items():
                free[chosen][name] = free[chosen].get(name, Decimal(0)) - amount
            self._bind(pod, chosen)
            return
        message = self._message(reasons)
        pod["status"]["phase"] = "Pending"
        pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": self._transition(pod, "False"),
                "reason": "Unschedulable",
                "message": message,
            }
        ]
        self.store.replace(PODS, pod)
        self._tried[pod["metadata"]["uid"]] = (
            self.store.clock.now,
            {name: dict(amounts) for name, amounts in free.items()},
        )
        self.recorder.scheduler(pod, "Warning", "FailedScheduling", message, "Scheduling")

    def _score(self, node: dict, free: Amounts) -> Decimal:
        allocatable = self._allocatable(node)
        shares = [
            free.get(r, Decimal(0)) / allocatable[r]
            for r in ("cpu", "memory")
            if allocatable.get(r)
        ]
        return sum(shares, Decimal(0)) / max(len(shares), 1)

    def _transition(self, pod: dict, status: str) -> str:
        for condition in pod["status"].get("conditions") or []:
            if condition["type"] == "PodScheduled" and condition["status"] == status:
                return condition["lastTransitionTime"]
        return self.store.clock.stamp()

    def _bind(self, pod: dict, node: str) -> None:
        pod["spec"]["nodeName"] = node
        pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": self.store.clock.stamp(),
            }
        ]
        self._tried.pop(pod["metadata"]["uid"], None)
        self.store.replace(PODS, pod)
        meta = pod["metadata"]
        message = f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}"
        self.recorder.scheduler(pod, "Normal", "Scheduled", message, "Binding")

    @staticmethod
    def _message(reasons: dict[str, list[str]]) -> str:
        """`0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are
        available: 3 No preemption victims found for incoming pod..` (the doubled full stop is
        the scheduler's)."""
        total = len(reasons)
        counts = Counter(reason for found in reasons.values() for reason in found)
        listed = ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items()))
        preemption = Counter(
            "Preemption is not helpful for scheduling"
            if any(reason in _UNRESOLVABLE for reason in found)
            else "No preemption victims found for incoming pod"
            for found in reasons.values()
        )
        victims = ", ".join(sorted(f"{count} {reason}" for reason, count in preemption.items()))
        if not total:
            return "no nodes available to schedule pods"
        return (
            f"0/{total} nodes are available: {listed}. "
            f"preemption: 0/{total} nodes are available: {victims}.."
        )
