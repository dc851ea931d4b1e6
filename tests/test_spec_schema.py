"""GET /api/v1/schema/spec: the spec's JSON Schema, generated from the pydantic models, agrees
with the API: every example spec validates, and what the API refuses for its shape (an unknown
field, a wrong type, a bound) the schema refuses too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from rest_framework.test import APIClient

SPECS = sorted((Path(__file__).resolve().parents[1] / "deploy_specs").glob("*.json"))


@pytest.fixture(scope="module")
def validator(django_db_blocker):
    with django_db_blocker.unblock():
        response = APIClient().get("/api/v1/schema/spec")  # no sign-in: it is public
    assert response.status_code == 200
    schema = response.json()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@pytest.mark.parametrize("path", SPECS, ids=lambda path: path.stem)
def test_every_example_spec_validates(validator, path):
    assert list(validator.iter_errors(json.loads(path.read_text()))) == []


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"colour": "red"}, "colour"),
        ({"metadata": {"instance": "two"}}, "metadata"),
        ({"metadata": {"instance": -1}}, "metadata"),
        ({"metadata": {"unknown": 1}}, "metadata"),
        ({"llm": {"engine": "no-such-engine", "model": "m"}}, "llm"),
    ],
)
def test_what_the_api_refuses_for_its_shape_the_schema_refuses(validator, api, change, where):
    spec = {**json.loads((SPECS[0].parent / "demo-tiny-vllm.json").read_text()), **change}
    assert api.post("/api/v1/services/preview", spec, format="json").status_code == 400
    errors = list(validator.iter_errors(spec))
    assert any(where in error.json_path or where in error.message for error in errors), errors
