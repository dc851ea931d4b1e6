"""Canary releases on the Kubernetes runtime against the fake API server (tests/kube), with
the real database and Redis: the API starts a release, the reconcile pass runs its version as
Deployments of their own whose pods are instances on track "canary", the canary controller
(workers.scheduling.canaries) moves it on, the gateways' snapshot splits by its weight; an abort
deletes the canary's objects and its pods leave routing at once; a promotion rolls the stable
Deployment to the canary's spec and deletes the canary's only once that has rolled out."""

from __future__ import annotations

import base64
import json
from dataclasses import replace

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from contracts.canary import CANARY_TRACK
from contracts.engine_keys import engine_key
from contracts.kube import names
from controlplane.services.models import Canary, Instance, Service
from tests.api_support import published
from tests.kube.test_kube_runtime import KUBE, SPECS, deploy, ready, rows, settle, spec
from workers.kube.api import Cluster
from workers.kube.reconcile import reconcile
from workers.scheduling import canaries

pytestmark = pytest.mark.django_db
CANARY_PODS = f"{names.selector('chat')},{names.LABEL_TRACK}={CANARY_TRACK}"
VERSION_TWO = [{"name": "V", "value": "2"}]


@pytest.fixture
def cluster(kube, store, settings) -> Cluster:
    settings.WHARF_RUNTIME = "kubernetes"
    return Cluster(kube.api_client, "default")


@pytest.fixture
def advance_all(django_capture_on_commit_callbacks):
    """A pass of the canary controller, its on-commit work (publishing) done."""

    def run():
        with django_capture_on_commit_callbacks(execute=True):
            return canaries.advance_all(timezone.now())

    return run


@pytest.fixture
def chat(kube, cluster, store, api):
    """chat: two ready pods of version 1, and a canary release of version 2 started."""
    deploy(spec())
    assert ready(kube, cluster, "chat").phase == "running"
    response = api.post("/api/v1/services/chat/canary",
                        {"spec": spec(env=VERSION_TWO), "steps": [10, 50, 100]},
                        format="json")  # fmt: skip
    assert response.status_code == 201, response.json()
    return Canary.objects.get()


def deployment_names(cluster: Cluster) -> set[str]:
    return {d["metadata"]["name"] for d in cluster.deployments(names.selector("chat"))}


def tracks() -> list[tuple[str, str]]:
    return sorted((r.track, r.state) for r in rows("chat"))


def running_canary(kube, cluster, advance_all) -> None:
    """The canary's pods made ready and the controller's first step taken."""
    settle(kube, cluster, "chat")
    kube.cluster.set_ready(CANARY_PODS)
    settle(kube, cluster, "chat")
    advance_all()
    assert Canary.objects.get().state == "running"


def test_an_active_canary_is_a_deployment_of_its_own_whose_pods_are_on_the_canary_track(
    kube, cluster, store, chat, advance_all
):
    stable = kube.apps.read_namespaced_deployment("chat", "default").spec.template
    service = settle(kube, cluster, "chat")
    assert deployment_names(cluster) == {"chat", "chat-canary"}
    trial = kube.apps.read_namespaced_deployment("chat-canary", "default")
    assert trial.spec.replicas == 2  # as many as the stable side
    assert trial.metadata.labels[names.LABEL_TRACK] == CANARY_TRACK
    assert trial.metadata.labels[names.LABEL_SPEC_HASH] == chat.spec_hash
    assert trial.spec.selector.match_labels[names.LABEL_TRACK] == CANARY_TRACK
    engine = trial.spec.template.spec.containers[0]
    assert {"name": "V", "value": "2"} in [{"name": e.name, "value": e.value} for e in engine.env]
    assert kube.apps.read_namespaced_deployment("chat", "default").spec.template == stable
    # Its own engine key, in its own Secret, which its pods read.
    secret = kube.core.read_namespaced_secret(names.secret_name("chat", CANARY_TRACK), "default")
    held = base64.b64decode(secret.data["engine-key"]).decode()
    assert held == engine_key(django_settings.WHARF_TOKEN_KEY.encode(), "k8s/chat-canary")
    assert tracks() == [("", "ready")] * 2 + [(CANARY_TRACK, "starting")] * 2
    assert (service.phase, service.ready_instances) == ("running", 2)  # the stable side's
    advance_all()
    assert Canary.objects.get().message == "starting: 0 of 2 canary instances ready"

    kube.cluster.set_ready(CANARY_PODS)
    settle(kube, cluster, "chat")
    advance_all()
    assert (Canary.objects.get().state, Canary.objects.get().weight) == ("running", 10)
    routed = published(store).services["chat"]
    assert routed.canary_weight == 10
    assert sorted((i.track, i.key) for i in routed.instances) == [
        ("", "k8s/chat"), ("", "k8s/chat"), (CANARY_TRACK, "k8s/chat-canary"),
        (CANARY_TRACK, "k8s/chat-canary"),
    ]  # fmt: skip


def test_an_aborted_canary_leaves_routing_at_once_and_its_objects_are_deleted(
    kube, cluster, store, chat, api, advance_all
):
    running_canary(kube, cluster, advance_all)
    assert api.post("/api/v1/services/chat/canary/abort").json()["state"] == "aborted"
    reconcile("chat", cluster, KUBE)  # one pass: before the garbage collector reaches a pod
    assert deployment_names(cluster) == {"chat"}
    assert tracks() == [("", "ready")] * 2 + [(CANARY_TRACK, "draining")] * 2
    routed = published(store).services["chat"]
    assert {i.track for i in routed.instances} == {""} and routed.canary_weight == 0
    secrets = {s.metadata.name for s in kube.core.list_namespaced_secret("default").items}
    assert secrets == {names.secret_name("chat")}
    kube.cluster.settle()
    kube.cluster.finish_terminating()
    service = settle(kube, cluster, "chat")
    assert tracks() == [("", "ready")] * 2
    assert (service.phase, service.spec["containers"][0].get("env")) == ("running", None)


def test_a_promoted_canary_serves_until_the_stable_deployment_has_rolled_to_it(
    kube, cluster, store, chat, api, advance_all
):
    running_canary(kube, cluster, advance_all)
    assert api.post("/api/v1/services/chat/canary/promote").json()["state"] == "promoted"
    service = settle(kube, cluster, "chat")
    assert service.parsed_spec().spec_hash() == chat.spec_hash
    main = kube.apps.read_namespaced_deployment("chat", "default")
    assert main.spec.template.metadata.labels[names.LABEL_SPEC_HASH] == chat.spec_hash
    # The main Deployment rolls (one new pod, not ready yet): the canary's pods serve on, as
    # stable ones of the service's version now, beside the old version's.
    assert deployment_names(cluster) == {"chat", "chat-canary"}
    routed = published(store).services["chat"]
    assert routed.canary_weight == 0 and len(routed.instances) == 4
    assert {i.track for i in routed.instances} == {""}
    assert {i.key for i in routed.instances} == {"k8s/chat", "k8s/chat-canary"}
    for _ in range(4):  # the rest of the roll
        kube.cluster.set_ready(names.selector("chat"))
        kube.cluster.finish_terminating()
        service = settle(kube, cluster, "chat")
        if "chat-canary" in deployment_names(cluster):
            assert {i.key for i in published(store).services["chat"].instances} >= {"k8s/chat"}
    assert deployment_names(cluster) == {"chat"}
    kube.cluster.finish_terminating()
    service = settle(kube, cluster, "chat")
    assert (service.phase, service.ready_instances) == ("running", 2)
    assert tracks() == [("", "ready")] * 2
    assert {(r.spec_hash, r.engine_key_name) for r in rows("chat")} == {
        (chat.spec_hash, "k8s/chat")
    }
    assert names.secret_name("chat", CANARY_TRACK) not in {
        s.metadata.name for s in kube.core.list_namespaced_secret("default").items
    }


def test_a_promoted_canary_stays_while_the_stable_side_is_not_ready(
    kube, cluster, store, chat, api, advance_all
):
    running_canary(kube, cluster, advance_all)
    api.post("/api/v1/services/chat/canary/promote")
    for _ in range(3):  # the new stable pods never pass their readiness probe
        kube.cluster.finish_terminating()
        settle(kube, cluster, "chat")
    assert "chat-canary" in deployment_names(cluster)
    serving = {i.name for i in published(store).services["chat"].instances}
    canary_pods = {p["metadata"]["name"] for p in cluster.pods(CANARY_PODS)}
    assert canary_pods and canary_pods <= serving


def test_a_canary_the_cluster_cannot_run_is_rolled_back_naming_the_field(
    kube, cluster, store, api, settings
):
    settings.WHARF_K8S_MODEL_CLAIM = "models"  # the API accepts its model-store model
    data = json.loads((SPECS / "pd-vllm-ascend-ranktable.json").read_text())
    name, with_store = data["name"], replace(KUBE, model_store_claim="models")
    deploy(data)
    settle(kube, cluster, name, conf=with_store)
    before = {d["metadata"]["name"] for d in cluster.deployments(names.selector(name))}
    data["llm"]["max_num_seqs"] = 128
    response = api.post(f"/api/v1/services/{name}/canary", {"spec": data}, format="json")
    assert response.status_code == 201, response.json()
    settle(kube, cluster, name, conf=with_store)
    release = Canary.objects.get()
    assert release.state == "rolled_back", release.message
    assert "llm.pd.rank_table: rank tables list one version's pods" in release.message
    assert {d["metadata"]["name"] for d in cluster.deployments(names.selector(name))} == before
    assert Service.objects.get(name=name).events.filter(reason="CanaryRolledBack").exists()
    assert not Instance.objects.filter(service__name=name, track=CANARY_TRACK).exists()
