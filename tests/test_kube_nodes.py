"""The cluster's nodes as Wharf's nodes, with their cards (workers.kube.nodes): tables."""

from __future__ import annotations

import pytest

from contracts.kube import names
from workers.kube import nodes

KUBE = names.KubeSettings(gpu_resource="nvidia.com/gpu", npu_resource="huawei.com/Ascend910")


@pytest.mark.parametrize(
    ("text", "value"),
    [("16", 16), ("500m", 0.5), ("64Gi", 64 * 2**30), ("1M", 1e6), ("2Ki", 2048), (None, 0),
     (8, 8), ("1e3", 1000)],
)  # fmt: skip
def test_quantities_read_as_kubernetes_writes_them(text, value) -> None:
    assert nodes.quantity(text) == value


def node(name: str, gpus: int = 0, npus: int = 0, ready: bool = True) -> dict:
    allocatable = {"cpu": "31500m", "memory": "128Gi", "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    if npus:
        allocatable["huawei.com/Ascend910"] = str(npus)
    return {
        "metadata": {"name": name, "labels": {"zone": "a"}},
        "status": {
            "allocatable": allocatable,
            "addresses": [{"type": "Hostname", "address": name},
                          {"type": "InternalIP", "address": "10.0.0.7"}],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }  # fmt: skip


def pod(name: str, node_name: str | None, limits: dict) -> dict:
    return {
        "metadata": {"name": name, "labels": names.labels("demo", "")},
        "spec": {"nodeName": node_name, "containers": [{"resources": {"limits": limits}}]},
    }


def test_a_node_shows_its_allocatable_cards_and_the_slots_wharfs_pods_hold() -> None:
    pods = [
        pod("demo-b", "gpu-1", {"nvidia.com/gpu": "2"}),
        pod("demo-a", "gpu-1", {"nvidia.com/gpu": "1", "cpu": "4"}),
        pod("demo-c", "gpu-2", {"nvidia.com/gpu": "1"}),
        pod("demo-pending", None, {"nvidia.com/gpu": "8"}),  # not scheduled: holds nothing
        pod("demo-cpu", "gpu-1", {"cpu": "2"}),
    ]
    one, two, npu = nodes.views([node("gpu-1", gpus=8), node("gpu-2", gpus=1),
                                 node("npu-1", npus=8, ready=False)], pods, KUBE)  # fmt: skip
    assert (one.name, one.address, one.labels, one.ready) == ("gpu-1", "10.0.0.7", {"zone": "a"},
                                                              True)  # fmt: skip
    assert (one.cpus, one.memory_mb) == (31, 128 * 1024)
    assert [c["kind"] for c in one.cards] == ["gpu"] * 8
    assert one.held == {"demo-a": "gpu:0", "demo-b": "gpu:1,2"}  # slots, in name order
    assert two.held == {"demo-c": "gpu:0"}
    assert [c["kind"] for c in npu.cards] == ["npu"] * 8 and not npu.ready


def test_card_resource_names_are_the_settings() -> None:
    kube = names.KubeSettings(gpu_resource="amd.com/gpu")
    amd = node("amd-1")
    amd["status"]["allocatable"]["amd.com/gpu"] = "4"
    (view,) = nodes.views([amd], [pod("demo-a", "amd-1", {"amd.com/gpu": "2"})], kube)
    assert len(view.cards) == 4 and view.held == {"demo-a": "gpu:0,1"}
