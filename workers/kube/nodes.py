"""The cluster's nodes as Wharf's nodes (`GET /api/v1/nodes`), with their cards.

A node's cards are its allocatable GPUs/NPUs (the device plugins' resources, named by
WHARF_K8S_GPU_RESOURCE / WHARF_K8S_NPU_RESOURCE); the cards Wharf's pods on it were given are
counted against them. Kubernetes does not say which physical card a pod holds, so a pod's
cards are shown as slots of its node (numbered in the order of its pods' names), not device
ids. Other workloads' pods are not Wharf's to read: a node's free cards are those Wharf has
not taken. A node whose `Ready` condition is not true is written without a heartbeat, so the
API shows it `not_ready`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from contracts.kube import names

RUNTIME = "kubernetes"
_SUFFIXES = (  # binary first: "Mi" before "M"
    ("Ki", 2**10),
    ("Mi", 2**20),
    ("Gi", 2**30),
    ("Ti", 2**40),
    ("Pi", 2**50),
    ("Ei", 2**60),
    ("m", 1e-3),
    ("k", 1e3),
    ("M", 1e6),
    ("G", 1e9),
    ("T", 1e12),
    ("P", 1e15),
    ("E", 1e18),
)


@dataclass(frozen=True)
class NodeView:
    name: str
    address: str
    labels: dict
    ready: bool
    cpus: int
    memory_mb: int
    disk_mb: int = 0
    cards: list[dict] = field(default_factory=list)  # {"kind", "index", "memory_mb"}
    # pod name -> its cards, encoded as contracts.allocation does ("gpu:0,1")
    held: dict[str, str] = field(default_factory=dict)


def quantity(text: str | int | None) -> float:
    """A Kubernetes quantity ("16", "500m", "64Gi", "1e3") as a number of its unit."""
    if text is None:
        return 0.0
    value = str(text)
    for suffix, factor in _SUFFIXES:
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value)


def _cards_of(pod: dict, kinds: dict[str, str]) -> tuple[str, int]:
    for container in (pod.get("spec") or {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        for resource, kind in kinds.items():
            if resource in limits:
                return kind, int(quantity(limits[resource]))
    return "", 0


def views(nodes: list[dict], pods: list[dict], kube: names.KubeSettings) -> list[NodeView]:
    """Every node, with its cards and the slots Wharf's (scheduled, live) pods hold."""
    kinds = {kube.gpu_resource: "gpu", kube.npu_resource: "npu"}
    on_node: dict[str, list[dict]] = {}
    for pod in pods:  # a terminating pod holds its cards until it is gone
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            on_node.setdefault(node, []).append(pod)
    out = []
    for node in nodes:
        meta, status = node.get("metadata") or {}, node.get("status") or {}
        allocatable = status.get("allocatable") or {}
        cards = [
            {"kind": kind, "index": index, "memory_mb": 0}
            for resource, kind in kinds.items()
            for index in range(int(quantity(allocatable.get(resource))))
        ]
        held, next_slot = {}, {"gpu": 0, "npu": 0}
        for pod in sorted(on_node.get(meta.get("name", ""), []), key=_pod_name):
            kind, count = _cards_of(pod, kinds)
            if count:
                start = next_slot[kind]
                held[_pod_name(pod)] = f"{kind}:" + ",".join(map(str, range(start, start + count)))
                next_slot[kind] += count
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions") or [])  # fmt: skip
        address = next((a["address"] for a in status.get("addresses") or []
                        if a.get("type") == "InternalIP"), meta.get("name", ""))  # fmt: skip
        out.append(NodeView(
            name=meta.get("name", ""), address=address, labels=dict(meta.get("labels") or {}),
            ready=ready, cpus=math.floor(quantity(allocatable.get("cpu"))),
            memory_mb=int(quantity(allocatable.get("memory")) // 2**20), cards=cards, held=held,
            disk_mb=int(quantity(allocatable.get("ephemeral-storage")) // 2**20),
        ))  # fmt: skip
    return out


def _pod_name(pod: dict) -> str:
    return str((pod.get("metadata") or {}).get("name", ""))


def sync(cluster, kube: names.KubeSettings) -> int:
    """Write the cluster's nodes as Node rows (and the slots each pod of Wharf's holds on
    its instance row); rows of nodes the cluster no longer has go. The number of nodes."""
    from django.utils import timezone

    from controlplane.nodes.models import Node
    from controlplane.services.models import Instance

    now = timezone.now()
    seen = views(cluster.nodes(), cluster.pods(names.selector()), kube)
    for view in seen:
        Node.objects.update_or_create(name=view.name, defaults={
            "address": view.address, "labels": view.labels, "cards": view.cards,
            "cpus": view.cpus, "memory_mb": view.memory_mb, "disk_mb": view.disk_mb,
            "runtime": RUNTIME, "inventory_digest": "",  # not a heartbeat's: read in full
            "heartbeat_at": now if view.ready else None,
        })  # fmt: skip
        for pod, devices in view.held.items():
            Instance.objects.filter(name=pod, runtime=RUNTIME).exclude(devices=devices).update(
                devices=devices
            )
    Node.objects.filter(runtime=RUNTIME).exclude(name__in=[v.name for v in seen]).delete()
    return len(seen)
