"""Bad input to the services API, one test per kind that once got a 500 or was written anyway:
bodies too deep or too large, values of the wrong type or size, route names, odd query
parameters. Each is a 4xx naming what is wrong, and nothing is written."""

from __future__ import annotations

import json

import pytest

from controlplane.json_body import MAX_BODY_BYTES, MAX_DEPTH, depth
from controlplane.services.models import Event, Service

pytestmark = pytest.mark.django_db

SPEC = {"name": "tiny", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}


def post_raw(api, body: str, path: str = "/api/v1/services"):
    return api.generic("POST", path, body, content_type="application/json")


def nothing_written() -> bool:
    return not Service.objects.exists() and not Event.objects.exists()


@pytest.mark.parametrize(("value", "expected"), [
    (1, 0), ("x", 0), ([], 1), ({}, 1), ({"a": [1, {"b": []}]}, 4), ([[[[]]]], 4),
])  # fmt: skip
def test_depth_counts_nested_containers(value, expected):
    assert depth(value) == expected


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 500, 100_000])
def test_a_deeply_nested_body_is_a_400(api, levels):
    response = post_raw(api, "[" * levels + "]" * levels)
    assert response.status_code == 400
    assert f"nested more than {MAX_DEPTH} levels" in response.json()["detail"]
    assert nothing_written()


def test_a_deeply_nested_value_inside_a_spec_is_a_400(api):
    spec = {**SPEC, "llm": {**SPEC["llm"], "options": {"--x": json.loads("[" * 40 + "]" * 40)}}}
    assert post_raw(api, json.dumps(spec)).status_code == 400
    assert nothing_written()


def test_a_body_over_the_size_bound_is_a_413(api):
    spec = {**SPEC, "containers": [{"command": "x" * MAX_BODY_BYTES}]}
    response = post_raw(api, json.dumps(spec))
    assert response.status_code == 413
    assert nothing_written()


@pytest.mark.parametrize("body", ['{"name": NaN}', '{"name": Infinity}', "{", b"\xff\xfe", "[]"])
def test_bodies_that_are_not_a_json_object_are_a_400(api, body):
    assert post_raw(api, body).status_code == 400
    assert nothing_written()


@pytest.mark.parametrize("name", ["preview", "Preview"])
def test_a_name_that_is_a_route_is_refused(api, name):
    response = api.post("/api/v1/services", {**SPEC, "name": name}, format="json")
    assert response.status_code == 400
    assert "route" in response.json()["errors"]["name"][0]
    assert nothing_written()


@pytest.mark.parametrize(("metadata", "field"), [
    ({"instance": "one"}, "metadata.instance"),  # "1" is EAS's 1 (contracts.eas.coerce)
    ({"rpc": {"rate_limit": "10/s"}}, "metadata.rpc.rate_limit"),
    ({"memory": 10**40}, "metadata.memory"),
    ({"gpu": 1.5}, "metadata.gpu"),
])  # fmt: skip
def test_wrong_types_and_sizes_are_named_and_not_written(api, metadata, field):
    response = api.post("/api/v1/services", {**SPEC, "metadata": metadata}, format="json")
    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert nothing_written()


def test_an_update_with_a_wrong_type_changes_nothing(api):
    assert api.post("/api/v1/services", SPEC, format="json").status_code == 201
    before = Service.objects.get().spec, Event.objects.count()
    bad = {**SPEC, "metadata": {"rpc": {"keepalive": "5000 ms"}}}
    assert api.put("/api/v1/services/tiny", bad, format="json").status_code == 400
    assert (Service.objects.get().spec, Event.objects.count()) == before


@pytest.mark.parametrize("limit", ["-1", "0", "abc", "1001", "1e3", "１"])
def test_an_odd_events_limit_is_a_400_naming_it(api, limit):
    api.post("/api/v1/services", SPEC, format="json")
    response = api.get(f"/api/v1/services/tiny/events?limit={limit}")
    assert response.status_code == 400
    assert "limit" in response.json()["errors"]


def test_an_unknown_phase_filter_is_a_400_naming_it(api):
    response = api.get("/api/v1/services?phase=sideways")
    assert response.status_code == 400
    assert "phase" in response.json()["errors"]


def test_a_format_that_names_no_renderer_is_a_400_naming_it(api):
    response = api.get("/api/v1/services?format=xml")
    assert response.status_code == 400
    assert "format" in response.json()["errors"]
