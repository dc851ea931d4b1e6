"""Published EAS service files (tests/eas_corpus/, each as published, its source in SOURCES.md)
through the real API, unchanged: every processor service is refused naming its processor
fields and what to deploy instead; the image-based ones Wharf takes today deploy. As more of
EAS's fields are acted on, files move into DEPLOYED (issue 27)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from contracts.eas.processors import FIELDS as PROCESSOR_FIELDS

pytestmark = pytest.mark.django_db

CORPUS = Path(__file__).parent / "eas_corpus"
ROW = re.compile(r"^\| (\d\d-[\w.-]+\.json) \|.*\| ([^|]+) \|$")
KINDS = {m[1]: m[2].strip() for line in (CORPUS / "SOURCES.md").read_text().splitlines()
         if (m := ROW.match(line))}  # fmt: skip
DEPLOYED = ["01-json-deploy-quickstart-2025.json", "02-json-deploy-quickstart-2026.json"]


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
    sent = json.loads((CORPUS / name).read_text())
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 201, answer.json()
    assert whole(KINDS[name])
