"""Ascend rank tables of a prefill/decode service on Kubernetes (`llm.pd.rank_table`), from
the pods the cluster scheduled: pure functions, no I/O.

On Wharf's own nodes the scheduler places every instance before any starts, so each one's
tables are written before it starts (workers.nodes.starter). On a cluster, every pod of a role
comes from one template, and which node and cards a pod gets is known only once it is
scheduled: the reconcile pass therefore writes the tables from the pods as they are, in one
ConfigMap of the service (`global.json`, and `<pod>.json`, each pod's local table), which
every pod mounts as a folder, so the kubelet brings each change to the pods. A pod's engine
reads them at the paths the seed's variables name: GLOBAL_RANK_TABLE_FILE_PATH the global
table, RANK_TABLE_FILE_PATH its own local one (`$(WHARF_POD_NAME).json`).

The pods' addresses are their pod IPs. Their cards and the cards' RoCE addresses come from the
annotation the Ascend device plugin (MindX DL) writes on each pod it gives NPUs to, the same
one Huawei's hccl-controller builds training rank tables from:
`{"pod_name": ..., "server_id": <node IP>, "devices": [{"device_id": "0", "device_ip": ...}]}`.

The tables list the current version's pods that are scheduled and not terminating, by role,
oldest first. They are `completed` once every such pod has its IP and cards and every role
that should run has one; until then `initializing`. A pod's init container (`python -m
workers.nodes.rank_tables`, in Wharf's image) holds its engine back until the tables are completed
and list the pod itself. As on Wharf's own nodes, a pod that comes later (a replacement, a
scale-up) is in the tables the pods that start after it read, not in those of the engines
already running.

An instance across hosts (unit.size N > 1) is a LeaderWorkerSet group here
(contracts.kube.lws): its N pods, leader and workers, are one instance's servers, ranked by
the worker index LWS labels each with, as on Wharf's own nodes (contracts.engines.rank_table);
each pod's local table is its group's servers, and the tables are complete only once every
group has all N pods.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from contracts.engines.rank_table import (
    PdMember,
    global_rank_table,
    instance_of,
    local_rank_table,
    ordered,
)
from contracts.engines.vllm_ascend import GLOBAL_RANK_TABLE
from contracts.kube import lws, names
from contracts.spec import ServiceSpec

FOLDER = GLOBAL_RANK_TABLE.rsplit("/", 1)[0]  # where pods mount the ConfigMap
GLOBAL_KEY = GLOBAL_RANK_TABLE.rsplit("/", 1)[1]
POD_NAME_ENV = "WHARF_POD_NAME"
LOCAL_TABLE = f"{FOLDER}/$({POD_NAME_ENV}).json"  # the kubelet expands the pod's name
# The device plugin's annotation: its older name, and the one newer releases also write.
DEVICE_ANNOTATIONS = (
    "ascend.kubectl.kubernetes.io/ascend-910-configuration",
    "ascend.kubectl.kubernetes.io/ascend-npu-configuration",
)
COMPLETED, INITIALIZING = "completed", "initializing"
SCHEDULER = "localhost"  # the scheduler group's address, as in the preview
PORT_NAME = "http"


def enabled(spec: ServiceSpec) -> bool:
    return bool(spec.llm and spec.llm.pd and spec.llm.pd.rank_table)


def config_map_name(service: str) -> str:
    return f"{names.slug(service)}-ranktable"


def local_key(pod: str) -> str:
    return f"{pod}.json"


@dataclass(frozen=True)
class Tables:
    """The ConfigMap's data, whether it is complete, and what it waits for when not."""

    data: dict[str, str]
    complete: bool
    waiting: str


def cards(pod: dict) -> tuple[tuple[int, ...], tuple[str, ...]] | None:
    """The pod's NPU ids and their RoCE addresses from the device plugin's annotation; None
    while it has none (or one that cannot be read)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    text = next((annotations[a] for a in DEVICE_ANNOTATIONS if annotations.get(a)), None)
    if text is None:
        return None
    try:
        devices = json.loads(text)["devices"]
        found = [(int(d["device_id"]), str(d.get("device_ip") or "")) for d in devices]
    except (ValueError, KeyError, TypeError):
        return None
    return tuple(d for d, _ in found), tuple(ip for _, ip in found)


def _port(pod: dict) -> int:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == PORT_NAME:
                return int(port["containerPort"])
    return 0


def _listed(pods: Iterable[dict], spec_hash: str) -> list[dict]:
    """The pods the tables are about: the version's, scheduled, not terminating, oldest first."""
    found = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(names.LABEL_SPEC_HASH) != spec_hash or meta.get("deletionTimestamp"):
            continue
        if (pod.get("spec") or {}).get("nodeName"):
            found.append(pod)
    return sorted(found, key=lambda p: (p["metadata"].get("creationTimestamp") or "",
                                        p["metadata"]["name"]))  # fmt: skip


def _instance(pod: dict) -> tuple[str, int]:
    """Which instance of its role a pod is part of, and its rank in it: a LeaderWorkerSet
    group's pods (an instance across hosts) are one instance, ranked by their worker index;
    any other pod is an instance of its own."""
    labels = pod["metadata"].get("labels") or {}
    if lws.LABEL_WORKER_INDEX not in labels:
        return pod["metadata"]["name"], 0
    group = f"{labels.get(lws.LABEL_SET_NAME, '')}/{labels.get(lws.LABEL_GROUP_INDEX, '')}"
    return group, int(labels[lws.LABEL_WORKER_INDEX])


def tables(pods: Iterable[dict], spec_hash: str, roles: Iterable[str], size: int = 1) -> Tables:
    """The service's rank tables from its pods (`roles`: those with pods wanted; `size`: the
    pods of one instance, unit.size). An instance across hosts is listed as soon as any of
    its pods is, and the tables are complete once each has all `size`."""
    members: dict[str, PdMember] = {}
    waiting: list[str] = []
    index = dict.fromkeys(("prefill", "decode"), 0)
    instances: dict[tuple[str, str], int] = {}
    scheduled: set[str] = set()
    for pod in _listed(pods, spec_hash):
        name = pod["metadata"]["name"]
        role = pod["metadata"]["labels"].get(names.LABEL_ROLE, "")
        ip, found = (pod.get("status") or {}).get("podIP"), cards(pod)
        if role not in index:
            continue
        scheduled.add(role)
        if not ip:
            waiting.append(f"pod {name} has no IP yet")
        elif found is None:
            waiting.append(f"pod {name} has no NPU addresses yet (the Ascend device plugin's "
                           f"{DEVICE_ANNOTATIONS[0]} annotation)")  # fmt: skip
        else:
            group, rank = _instance(pod)
            if (role, group) not in instances:
                instances[role, group] = index[role]
                index[role] += 1
            members[name] = PdMember(
                role=role, index=instances[role, group], host_ip=ip, device_ids=found[0],
                port=_port(pod), device_ips=found[1], rank=rank,
            )  # fmt: skip
    waiting += [f"no {role} pod scheduled yet" for role in roles if role not in scheduled]
    waiting += _short_groups(members.values(), size)
    status = INITIALIZING if waiting else COMPLETED
    whole = {**global_rank_table(ordered(members.values()), SCHEDULER), "status": status}
    data = {GLOBAL_KEY: json.dumps(whole, indent=2)}
    for name, member in members.items():
        local = local_rank_table(*instance_of(members.values(), member))
        data[local_key(name)] = json.dumps({**local, "status": status}, indent=2)
    return Tables(data, not waiting, "; ".join(waiting))


def _short_groups(members: Iterable[PdMember], size: int) -> list[str]:
    """What instances across hosts wait for: those with fewer than `size` pods listed."""
    counts = Counter((m.role, m.index) for m in members)
    return [
        f"{role} instance {index} has {count} of its {size} pods ready"
        for (role, index), count in sorted(counts.items())
        if count < size
    ]
