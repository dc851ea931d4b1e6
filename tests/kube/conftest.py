"""Fixtures for the Kubernetes tests: a fake cluster served on loopback, and the official
client configured for it (see kube_fake_cluster for what the fake does)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import kubernetes
import pytest
from kube_fake_cluster import FakeCluster


@dataclass
class KubeCluster:
    """What the `kube` fixture yields: the cluster's hooks, its URL and a client of it."""

    cluster: FakeCluster
    url: str
    api_client: kubernetes.client.ApiClient

    @property
    def core(self) -> kubernetes.client.CoreV1Api:
        return kubernetes.client.CoreV1Api(self.api_client)

    @property
    def apps(self) -> kubernetes.client.AppsV1Api:
        return kubernetes.client.AppsV1Api(self.api_client)


@pytest.fixture
def start_kube() -> Iterator[Callable[..., KubeCluster]]:
    """Starts fake clusters (FakeCluster's options as keywords); stops them afterwards."""
    started: list[KubeCluster] = []

    def start(**options: object) -> KubeCluster:
        cluster = FakeCluster(**options)  # type: ignore[arg-type]
        url = cluster.start()
        started.append(KubeCluster(cluster, url, cluster.api_client()))
        return started[-1]

    yield start
    for kube in started:
        kube.api_client.close()
        kube.cluster.stop()


@pytest.fixture
def kube(start_kube: Callable[..., KubeCluster]) -> KubeCluster:
    """A fake cluster of three nodes (two with 8 nvidia.com/gpu, one with 8
    huawei.com/Ascend910) and the namespace `default`; its controllers run when the test
    calls `kube.cluster.settle()`."""
    return start_kube()
