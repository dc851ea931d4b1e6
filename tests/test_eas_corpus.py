"""Published EAS service files (tests/eas_corpus/, each as published, its source in SOURCES.md)
through the real API, unchanged: every processor service is refused naming its processor
fields and what to deploy instead; every image service deploys (placed, or pending saying what
its node lacks), but those that need what Wharf does not run yet, refused by name; every
fragment is taken inside a small service."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.utils import timezone

from contracts.eas import normalise
from contracts.eas.processors import FIELDS as PROCESSOR_FIELDS
from contracts.spec import parse_spec
from controlplane.nodes.models import Node
from controlplane.services.models import Service
from tests.api_support import grant
from workers.fleet import FleetSettings
from workers.scheduling.scheduler import schedule

pytestmark = pytest.mark.django_db

CORPUS = Path(__file__).parent / "eas_corpus"
ROW = re.compile(r"^\| (\d\d-[\w.-]+\.json) \|.*\| ([^|]+) \|$")
KINDS = {m[1]: m[2].strip() for line in (CORPUS / "SOURCES.md").read_text().splitlines()
         if (m := ROW.match(line))}  # fmt: skip
# Every image service of the corpus but those test_what_wharf_does_not_run_yet names.
DEPLOYED = [f"{n}-{rest}" for n, rest in (
    ("01", "json-deploy-quickstart-2025.json"), ("02", "json-deploy-quickstart-2026.json"),
    ("18", "public-resources-spot.json"), ("23", "createservice-api-image.json"),
    ("24", "createservice-api-aiweb.json"), ("37", "pai-rag-multi-container.json"),
    ("39", "skill-vllm-oss-startup-check.json"),
    ("40", "skill-vllm-autoscaler.json"), ("41", "skill-vllm-nlb.json"),
    ("42", "skill-sglang-health-check.json"), ("43", "skill-resource-group-gpu.json"),
    ("44", "skill-dedicated-gateway.json"), ("45", "skill-full-example-runtime.json"),
    ("46", "skill-combined-top-level-eas-rpc.json"), ("47", "skill-top-level-resource.json"),
)]  # fmt: skip


def whole(kind: str) -> bool:
    return not kind.startswith("fragment")


def files(*kinds: str) -> list[str]:
    return sorted(name for name, kind in KINDS.items() if kind.split(" ")[0] in kinds
                  and not name.endswith(".invalid.json"))  # fmt: skip


def test_every_file_is_in_sources_with_its_kind():
    on_disk = sorted(p.name for p in CORPUS.glob("*.json"))
    assert sorted(KINDS) == on_disk and len(on_disk) >= 28
    for name in on_disk:
        if not name.endswith(".invalid.json"):
            json.loads((CORPUS / name).read_text())  # valid JSON, as published


@pytest.mark.parametrize("name", files("processor", "mixed"))
def test_a_processor_service_is_refused_naming_its_processor_fields(api, name):
    sent = json.loads((CORPUS / name).read_text())
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 400, answer.json()
    errors = answer.json()["errors"]
    named = {field for field in PROCESSOR_FIELDS if field in sent}
    assert named and named <= set(errors)
    assert all("deploy an image in containers[]" in errors[field][0] for field in named)


@pytest.mark.parametrize("name", DEPLOYED)
def test_a_published_image_service_deploys_unchanged(api, store, name):
    """Through the API as published (the operator having granted the workspace the buckets and
    resource groups the file names), then one scheduler pass over a CPU node: placed where it
    fits, else pending with what the node lacks (its cards, its resource group's label)."""
    sent = json.loads((CORPUS / name).read_text())
    resource = (sent.get("metadata") or {}).get("resource") or sent.get("resource")
    grant(platform_buckets=["oss://*"], resource_groups=[resource] if resource else [])
    Node.objects.create(name="cpu-node", address="10.0.0.9", cpus=16, memory_mb=65536,
                        heartbeat_at=timezone.now())  # fmt: skip
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 201, answer.json()
    assert whole(KINDS[name])
    service = Service.objects.get(name=answer.json()["name"])
    schedule(service.name, FleetSettings())
    service.refresh_from_db()
    spec = service.parsed_spec()
    if spec.metadata.gpu or resource:
        assert service.phase == "pending", (service.phase, service.last_error)
        lacks = f"lacks label resource={resource}" if resource else "has no gpu"
        assert f"cpu-node: {lacks}" in service.last_error
    else:
        assert [i.node for i in service.instances.all()] == ["cpu-node"] * spec.metadata.instance


@pytest.mark.parametrize("name", sorted(n for n, kind in KINDS.items()
                                        if kind.startswith("fragment")
                                        and not n.endswith(".invalid.json")))  # fmt: skip
def test_a_published_fragment_is_taken_in_a_service(name):
    """A fragment (a section of a service as a page shows it) inside a small service: its
    fields are taken in EAS's spellings, nothing refused."""
    fragment = json.loads((CORPUS / name).read_text())
    container = {"image": "img", "command": "serve", "port": 8000}
    if KINDS[name].startswith("fragment (container)"):
        sent = {"name": "frag", "containers": [{**container, **fragment}]}
    else:
        sent = {"name": "frag", "containers": [container], **fragment}
        sent["metadata"] = {"instance": 1, **fragment.get("metadata", {})}
    parse_spec(normalise(sent))  # raises naming any field refused


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        # The page offers OSS or NAS for one folder; both at once is what EAS refuses too.
        ("19-sd-webui-standard.json", ["storage[1].mount_path"]),
        # The same page's Async edition, with the same choice written both ways (its type and
        # queue are taken: test_the_async_edition_deploys_with_one_of_its_mounts).
        ("20-sd-webui-api-async.json", ["storage[1].mount_path"]),
        # An elastic job with a dataset, as a template: its placeholders (${EAS_RESOURCE_ID})
        # are to be filled in first.
        ("29-torcheasyrec-aot-export-elasticjob.json", ["metadata.resource"]),
    ],
)
def test_what_wharf_does_not_run_yet_is_refused_by_name(api, name, fields):
    sent = json.loads((CORPUS / name).read_text())
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 400
    assert set(fields) <= set(answer.json()["errors"]), answer.json()


def test_the_async_edition_deploys_with_one_of_its_mounts(api, store):
    """EAS's SD web UI API edition as an Async service (type, rpc.worker_threads, its queue
    block), its data folder on OSS alone: created, its queue's cloud-only sizes warned, and it
    gets its queues (contracts.spec_queue) with its max_delivery."""
    sent = json.loads((CORPUS / "20-sd-webui-api-async.json").read_text())
    sent["storage"] = sent["storage"][:1]
    grant(platform_buckets=["oss://*"])
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 201, answer.json()
    warned = {w["field"] for w in answer.json()["warnings"]}
    assert {"queue.cpu", "queue.memory"} <= warned and "queue.resource" not in warned
    attributes = api.get("/api/v1/services/sd_async").json()
    assert attributes["spec"]["metadata"]["type"] == "Async"
    assert attributes["spec"]["queue"]["max_delivery"] == 1
