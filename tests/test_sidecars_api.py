"""Several containers in one instance through the API: the preview shows every container's
command; a sidecar's image from a registry the node resolves to a local address is refused
by name; the nodes a workspace may see list its sidecars' images."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.spec import parse_spec
from controlplane.workspaces.models import Workspace
from tests.api_support import grant

pytestmark = pytest.mark.django_db

CORPUS = Path(__file__).parent / "eas_corpus" / "37-pai-rag-multi-container.json"


def test_the_preview_shows_every_containers_command(api):
    answer = api.post("/api/v1/services/preview", json.loads(CORPUS.read_text()), format="json")
    assert answer.status_code == 200, answer.json()
    (container,) = answer.json()["containers"]
    assert container["command"] == ["/bin/sh", "-c", "/docker-entrypoint.sh nginx"]
    assert [(s["index"], s["port"], s["command"][-1]) for s in container["sidecars"]] == [
        (1, 8002, "pai_rag ui"), (2, 8001, "pai_rag serve")]  # fmt: skip
    assert container["sidecars"][1]["env"] == {"PAIRAG_RAG__embedding__source": "huggingface"}


def test_a_sidecar_port_taken_twice_is_a_400_naming_it(api):
    sent = json.loads(CORPUS.read_text())
    sent["containers"][2]["port"] = 8002
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 400
    assert "port 8002 is containers[1]'s" in answer.json()["errors"]["containers[2].port"][0]


def test_a_sidecar_image_whose_registry_resolves_locally_is_refused_on_the_node():
    from controlplane.workspaces.policy import registry_refusals

    spec = parse_spec({"name": "rag", "containers": [
        {"image": "nginx:1", "port": 8680, "script": "nginx"},
        {"image": "registry.corp/team/ui:1", "port": 8002, "script": "ui"},
    ]})  # fmt: skip
    grant()
    workspace = Workspace.objects.get(name="default")
    found = registry_refusals(spec, workspace, resolve=lambda host: ["10.1.2.3"])
    assert list(found) == ["containers[1].image"]
    assert "resolves to 10.1.2.3" in found["containers[1].image"][0]


def test_the_images_a_workspace_uses_include_its_sidecars(api):
    from controlplane.nodes.api.serializers import workspace_uses

    answer = api.post("/api/v1/services", json.loads(CORPUS.read_text()), format="json")
    assert answer.status_code == 201, answer.json()
    images, _ = workspace_uses(Workspace.objects.get(name="default").id)
    rag = "eas-registry-vpc.cn-hangzhou.cr.aliyuncs.com/pai-eas/pai-rag"
    assert {f"{rag}:0.1-ui", f"{rag}:0.1"} <= images
