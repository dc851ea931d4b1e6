"""An instance across hosts (unit.size > 1) on a cluster without LeaderWorkerSet, against the
fake API server (tests/kube), which, like a cluster without the CRD, answers 404 for the
`leaderworkerset.x-k8s.io` group: the service gets a CannotRunOnCluster event naming the CRD
and how to install it, and nothing of it is applied. What it renders where the CRD is
installed: tests/test_kube_lws.py."""

from __future__ import annotations

import pytest

from contracts.kube import lws, names
from controlplane.services.models import Event, Service
from tests.kube.test_kube_runtime import KUBE, deploy, ready, settle, spec, update
from workers.kube.api import Cluster
from workers.kube.reconcile import reconcile

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(kube, store, settings) -> Cluster:
    settings.WHARF_RUNTIME = "kubernetes"
    return Cluster(kube.api_client, "default")


def across_hosts(name: str = "chat") -> dict:
    data = spec(name, instances=1, gpu=1)
    data["llm"] = {**data["llm"], "pipeline_parallel_size": 2}
    return {**data, "unit": {"size": 2}}


def cannot_run(name: str) -> list[str]:
    events = Event.objects.filter(service__name=name, reason="CannotRunOnCluster")
    return list(events.values_list("message", flat=True))


def test_the_cluster_has_no_leader_worker_sets_so_the_fake_answers_none(cluster):
    assert cluster.leader_worker_sets(names.selector("chat")) is None


def test_without_the_crd_nothing_is_applied_and_the_event_says_how_to_install_it(kube, cluster):
    deploy(across_hosts())
    assert reconcile("chat", cluster, KUBE) is None
    (message,) = cannot_run("chat")
    assert message.startswith("unit.size: ")
    assert lws.CRD in message and lws.INSTALL in message
    assert kube.core.list_namespaced_config_map("default").items == []
    assert kube.core.list_namespaced_secret("default").items == []
    assert cluster.deployments(names.selector("chat")) == []
    service = Service.objects.get(name="chat")
    assert service.phase == "failed" and service.last_error == message
    reconcile("chat", cluster, KUBE)  # and again: still nothing
    assert kube.core.list_namespaced_config_map("default").items == []


def test_a_service_updated_to_span_hosts_stops_its_deployment_and_says_why(kube, cluster):
    deploy(spec("chat", instances=1))
    ready(kube, cluster, "chat")
    assert len(cluster.deployments(names.selector("chat"))) == 1
    update("chat", across_hosts())
    service = settle(kube, cluster, "chat")
    assert cluster.deployments(names.selector("chat")) == []
    assert lws.CRD in service.last_error and cannot_run("chat")
