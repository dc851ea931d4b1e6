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


@pytest.fixture
def lws_cluster(start_kube, store, settings):
    """A fake cluster with the LeaderWorkerSet CRD installed (its resource served; no
    controller makes the groups' pods)."""
    settings.WHARF_RUNTIME = "kubernetes"
    kube = start_kube(leader_worker_sets=True)
    return kube, Cluster(kube.api_client, "default")


def test_with_the_crd_a_leader_worker_set_and_its_leaders_service_are_applied(lws_cluster):
    kube, cluster = lws_cluster
    deploy(across_hosts())
    reconcile("chat", cluster, KUBE)
    assert cannot_run("chat") == []
    (found,) = cluster.leader_worker_sets(names.selector("chat"))
    assert found["metadata"]["name"] == "chat"
    group = found["spec"]["leaderWorkerTemplate"]
    assert (found["spec"]["replicas"], group["size"]) == (1, 2)
    root = kube.core.read_namespaced_config_map(names.root_name("chat"), "default")
    assert found["metadata"]["ownerReferences"][0]["uid"] == root.metadata.uid
    leaders = kube.core.read_namespaced_service(lws.leader_service_name("chat"), "default")
    assert leaders.spec.selector[lws.LABEL_WORKER_INDEX] == "0"
    assert cluster.deployments(names.selector("chat")) == []
    # Back on one host: the set and its leaders' Service go, a Deployment comes.
    update("chat", spec("chat", instances=1))
    reconcile("chat", cluster, KUBE)
    assert cluster.leader_worker_sets(names.selector("chat")) == []
    assert [s.metadata.name for s in kube.core.list_namespaced_service("default").items] == []
    assert len(cluster.deployments(names.selector("chat"))) == 1
    made = set(kube.cluster.authorized)
    assert {("create", lws.GROUP, lws.PLURAL), ("list", lws.GROUP, lws.PLURAL),
            ("delete", lws.GROUP, lws.PLURAL), ("create", "", "services"),
            ("delete", "", "services")} <= made  # fmt: skip
