"""The Ascend device plugin (MindX DL's) of the fake's NPU nodes: when the kubelet admits a pod
that asks for huawei.com/Ascend910, it gives the pod the node's lowest free NPUs and writes
which, with each card's RoCE address, in the annotation Huawei's hccl-controller and Wharf's
rank tables read:

    ascend.kubectl.kubernetes.io/ascend-910-configuration:
      {"pod_name": "...", "server_id": "<node IP>",
       "devices": [{"device_id": "0", "device_ip": "29.<node>.0.1"}, ...]}

A card stays taken while a pod holding it is there, terminating included.
"""

from __future__ import annotations

import json

from kube_fake_store import KINDS, Store

PODS = KINDS["pods"]
RESOURCE = "huawei.com/Ascend910"
ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"


def wanted(pod: dict) -> int:
    return sum(
        int(((c.get("resources") or {}).get("limits") or {}).get(RESOURCE, 0))
        for c in pod["spec"]["containers"]
    )


def held(pod: dict) -> set[int]:
    text = (pod["metadata"].get("annotations") or {}).get(ANNOTATION)
    return {int(d["device_id"]) for d in json.loads(text)["devices"]} if text else set()


def allocate(store: Store, pod: dict, node: dict, host_ip: str) -> None:
    """Annotates `pod` (in place) with the NPUs it gets on `node`."""
    count = wanted(pod)
    if not count or held(pod):
        return
    name = node["metadata"]["name"]
    taken: set[int] = set()
    for other in store.items(PODS):
        if other["metadata"]["uid"] != pod["metadata"]["uid"] and (
            other["spec"].get("nodeName") == name
        ):
            taken |= held(other)
    capacity = int(node["status"]["allocatable"].get(RESOURCE, 0))
    cards = [card for card in range(capacity) if card not in taken][:count]
    host = host_ip.rsplit(".", 1)[-1]
    devices = [{"device_id": str(c), "device_ip": f"29.{host}.{c}.1"} for c in cards]
    configuration = {"pod_name": pod["metadata"]["name"], "server_id": host_ip, "devices": devices}
    pod["metadata"].setdefault("annotations", {})[ANNOTATION] = json.dumps(configuration)
