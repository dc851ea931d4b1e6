"""Hub models on the Kubernetes runtime, against the fake API server and a local fake hub (the
real database): the worker resolves the revision before it applies and records the commit in
the version; the pods' init container stages that commit, with the token from the Secret;
an update keeps the commit though the branch moved; a hub that cannot be reached leaves what
runs alone and tries again; a repository that does not exist cannot run, with the field."""

from __future__ import annotations

import base64

import pytest
from django.db import transaction

from contracts.kube import names
from controlplane.cluster import kube_settings
from controlplane.services.models import Event, Service, ServiceVersion
from controlplane.services.versions import record_version
from tests.api_support import default_workspace
from tests.hub_fake import FakeHub
from tests.hub_models import tiny_files
from workers.kube.api import Cluster
from workers.kube.reconcile import HUB_RETRY, reconcile
from workers.models import hub

pytestmark = pytest.mark.django_db
TOKEN = "hf_kube_pods_secret"


@pytest.fixture
def cluster(kube, settings, monkeypatch) -> Cluster:
    settings.WHARF_RUNTIME = "kubernetes"
    monkeypatch.setattr(hub, "RETRY_DELAY", 0.0)
    return Cluster(kube.api_client, "default")


@pytest.fixture
def fake(settings):
    with FakeHub() as fake:
        fake.add_repo("wharf/tiny", tiny_files(), private=True, token=TOKEN)
        settings.WHARF_HF_ENDPOINT = fake.url
        yield fake


def passes(cluster: Cluster) -> float | None:
    """A reconcile pass with the settings the workers render with (the hubs' endpoints)."""
    return reconcile("hubbed", cluster, kube_settings())


def spec(model: str = "hf://wharf/tiny", max_model_len: int = 512) -> dict:
    return {"name": "hubbed", "metadata": {"instance": 1, "gpu": 1},
            "llm": {"engine": "vllm", "model": model, "hub_token": TOKEN,
                    "max_model_len": max_model_len}}  # fmt: skip


def save(data: dict, note: str = "created") -> None:
    with transaction.atomic():
        service, created = Service.objects.get_or_create(
            workspace=default_workspace(), name=data["name"], defaults={"spec": data}
        )
        if not created:
            generation = service.generation + 1
            Service.objects.filter(pk=service.pk).update(spec=data, generation=generation)
        record_version(service, data, note)


def stager(kube) -> dict:
    deployment = kube.apps.read_namespaced_deployment("hubbed", "default")
    (init,) = kube.api_client.sanitize_for_serialization(deployment)["spec"]["template"]["spec"][
        "initContainers"]  # fmt: skip
    return init


def test_pods_stage_the_commit_their_version_records(kube, cluster, fake):
    first = fake.repos["wharf/tiny"].branches["main"]
    save(spec())
    passes(cluster)
    assert ServiceVersion.objects.get(number=1).hub_commits == {"hf://wharf/tiny": first}
    init = stager(kube)
    assert init["args"][3:] == ["--into", "/staged/0", "--endpoint", fake.url, "--commit", first,
                                "hf://wharf/tiny"]  # fmt: skip
    assert init["env"][0]["name"] == "WHARF_HUB_TOKEN"
    secret = kube.core.read_namespaced_secret(names.secret_name("hubbed"), "default")
    assert base64.b64decode(secret.data["hub-token"]).decode() == TOKEN
    deployment = kube.api_client.sanitize_for_serialization(
        kube.apps.read_namespaced_deployment("hubbed", "default"))  # fmt: skip
    assert TOKEN not in str(deployment)

    fake.commit("wharf/tiny", {**tiny_files(), "config.json": b"{}"})  # main moves on
    save(spec(max_model_len=1024), "updated")  # a new spec hash, the same model
    passes(cluster)
    assert ServiceVersion.objects.get(number=2).hub_commits == {"hf://wharf/tiny": first}
    assert stager(kube)["args"][8] == first


def test_a_hub_down_leaves_what_runs_and_a_missing_repository_cannot_run(kube, cluster, fake,
                                                                         settings):  # fmt: skip
    save(spec())
    passes(cluster)  # applied, with its commit recorded
    settings.WHARF_HF_ENDPOINT = "http://127.0.0.1:9"
    save(spec("hf://wharf/other"), "updated")  # a new model, and the hub is down
    assert passes(cluster) == HUB_RETRY
    (event,) = Event.objects.filter(reason="HubUnreachable")
    assert "127.0.0.1:9" in event.message and TOKEN not in event.message
    assert stager(kube)["args"][-1] == "hf://wharf/tiny"  # what ran stays as it was
    settings.WHARF_HF_ENDPOINT = fake.url  # the hub is back: the model does not exist
    passes(cluster)
    (refused,) = Event.objects.filter(reason="CannotRunOnCluster")
    assert refused.message.startswith("llm.model: ") and "no such repository" in refused.message
    assert Service.objects.get(name="hubbed").phase == "failed"
