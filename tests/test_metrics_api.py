"""The engine metrics API: GET /api/v1/services/<name>/metrics (each instance's newest sample,
last minute's rates and a series, from the scrapers' Redis layout) and GET
/api/v1/metrics/targets (Prometheus HTTP SD), both per workspace, and both in the OpenAPI
schema. Samples are written as the scrapers write them (workers.scaling.scraper.write)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis
from rest_framework.test import APIClient

from contracts import engine_load
from contracts.spec import parse_spec
from controlplane.services.models import Instance, Service
from controlplane.workspaces.models import Workspace
from tests.api_support import client_for, default_workspace, member
from workers.scaling.scraper import write

pytestmark = pytest.mark.django_db
SPEC = {"name": "tiny", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}
PD = json.loads((Path(__file__).parents[1] / "deploy_specs/pd-vllm-cpu-1p1d.json").read_text())
CUSTOM = {"name": "plain", "containers": [{"image": "x", "command": "serve", "port": 8000}]}
NAMES = ("tiny-0", "tiny-1", "theirs-0", "plain-0", "pd-p0", "pd-d0")


@pytest.fixture
def store(settings, redis_url):
    settings.REDIS_URL = redis_url
    client = redis.Redis.from_url(redis_url)
    keys = [k for n in NAMES for k in (engine_load.latest_key(n), engine_load.series_key(n))]
    client.delete(*keys)
    yield client
    client.delete(*keys)


def _deploy(spec: dict, workspace: Workspace | None = None) -> Service:
    return Service.objects.create(
        workspace=workspace or default_workspace(), name=spec["name"], spec=spec
    )


def _instance(service: Service, name: str, url: str = "http://127.0.0.1:8101", **fields):
    fields = {"state": "ready", "node": "n1", **fields}
    return Instance.objects.create(
        service=service, name=name, runtime="process", url=url,
        spec_hash=parse_spec(service.spec).spec_hash(), **fields,
    )  # fmt: skip


def _samples(store, instance: str, now: float, seconds: int = 120, step: int = 2) -> None:
    """A scraper's samples over `seconds`: 10 generated tokens/s, half the prefix queries
    hit, 0.25 s to first token, 2 running and a KV cache filling up."""
    for t in range(-seconds, 1, step):
        n = seconds + t
        write(store, instance, {
            "at": now + t, "running": 2, "waiting": 1, "kv_cache": n / (2 * seconds),
            "prefix_hits": 5 * n, "prefix_queries": 10 * n, "ttft_sum": 0.25 * n,
            "ttft_count": n, "prompt_tokens": 20 * n, "generation_tokens": 10 * n,
        })  # fmt: skip


def test_a_services_instances_with_their_latest_sample_rates_and_series(api, store):
    service = _deploy(SPEC)
    _instance(service, "tiny-0")
    _instance(service, "tiny-1", state="starting", url="")
    now = time.time()
    _samples(store, "tiny-0", now)
    answer = api.get("/api/v1/services/tiny/metrics")
    assert answer.status_code == 200
    body = answer.json()
    assert body["service"] == "tiny" and body["interval"] == engine_load.INTERVAL
    ready, starting = body["instances"]
    assert {k: ready[k] for k in ("name", "role", "node", "state")} == {
        "name": "tiny-0", "role": "", "node": "n1", "state": "ready"}  # fmt: skip
    assert ready["latest"]["at"] == pytest.approx(now) and ready["latest"]["kv_cache"] == 0.5
    assert ready["rates"] == pytest.approx({
        "prefix_hit_rate": 0.5, "ttft": 0.25, "prompt_tps": 20, "generation_tps": 10})  # fmt: skip
    assert len(ready["series"]) == 61  # two minutes every 2 s, oldest first
    first, last = ready["series"][0], ready["series"][-1]
    assert first["time"] == pytest.approx(now - 120) and first["generation_tps"] is None
    assert last == pytest.approx({"time": now, "running": 2, "waiting": 1, "kv_cache": 0.5,
        "prefix_hit_rate": 0.5, "ttft": 0.25, "generation_tps": 10})  # fmt: skip
    assert starting == {"name": "tiny-1", "role": "", "node": "n1", "state": "starting",
                        "latest": None, "rates": {}, "series": []}  # fmt: skip


def test_the_series_covers_the_minutes_asked_for(api, store):
    _instance(_deploy(SPEC), "tiny-0")
    now = time.time()
    _samples(store, "tiny-0", now, seconds=300)
    series = api.get("/api/v1/services/tiny/metrics?minutes=1").json()["instances"][0]["series"]
    assert 29 <= len(series) <= 31 and all(p["time"] >= now - 61 for p in series)
    for bad in ("0", "16", "x", "-1", "1.5"):
        refused = api.get(f"/api/v1/services/tiny/metrics?minutes={bad}")
        assert refused.status_code == 400 and "minutes" in refused.json()["errors"], bad


def test_a_stale_sample_is_no_latest_and_a_restart_moves_no_rate(api, store):
    _instance(_deploy(SPEC), "tiny-0")
    now = time.time()
    write(store, "tiny-0", {"at": now - 4, "generation_tokens": 500.0, "ttft_count": 9.0})
    write(store, "tiny-0", {"at": now - 2, "generation_tokens": 20.0, "ttft_count": 1.0})
    store.delete(engine_load.latest_key("tiny-0"))  # as after STALE seconds
    instance = api.get("/api/v1/services/tiny/metrics").json()["instances"][0]
    assert instance["latest"] is None and instance["rates"] == {}
    assert [p["generation_tps"] for p in instance["series"]] == [None, None]


def test_a_viewer_reads_the_metrics(store):
    _instance(_deploy(SPEC), "tiny-0")
    viewer = client_for("vera", role="viewer")
    assert viewer.get("/api/v1/services/tiny/metrics").status_code == 200
    assert viewer.get("/api/v1/metrics/targets").status_code == 200


def test_another_workspaces_service_is_not_found(store):
    team = member(client_for("tom").user, "owner", "team")
    _instance(_deploy({**SPEC, "name": "theirs"}, team), "theirs-0")
    outsider = client_for("olga")
    answer = outsider.get("/api/v1/services/theirs/metrics")
    assert answer.status_code == 404
    assert outsider.get("/api/v1/services/nothing/metrics").status_code == 404
    assert outsider.get("/api/v1/metrics/targets").json() == []


def test_without_a_token_nothing_is_answered(store):
    _instance(_deploy(SPEC), "tiny-0")
    for path in ("/api/v1/services/tiny/metrics", "/api/v1/metrics/targets"):
        assert APIClient().get(path).status_code in (401, 403), path


def test_redis_away_is_a_503_naming_it(api, settings):
    _instance(_deploy(SPEC), "tiny-0")
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    answer = api.get("/api/v1/services/tiny/metrics")
    assert answer.status_code == 503 and "Redis" in answer.json()["detail"]


def test_the_targets_are_prometheus_http_sd_groups(api, store):
    _instance(_deploy(SPEC), "tiny-0", url="http://10.0.0.7:8101/", node="gpu-a")
    pd = _deploy(PD)
    _instance(pd, "pd-p0", url="http://10.0.0.8:8200", role="prefill")
    _instance(pd, "pd-d0", url="https://10.0.0.8:8300/engine", role="decode", node="gpu-b")
    answer = api.get("/api/v1/metrics/targets")
    assert answer.status_code == 200 and answer["Content-Type"] == "application/json"
    groups = {g["labels"]["wharf_instance"]: g for g in answer.json()}
    assert groups["tiny-0"] == {"targets": ["10.0.0.7:8101"], "labels": {
        "__scheme__": "http", "__metrics_path__": "/metrics", "wharf_service": "tiny",
        "wharf_instance": "tiny-0", "wharf_role": "", "wharf_node": "gpu-a",
        "wharf_workspace": "default"}}  # fmt: skip
    assert groups["pd-p0"]["labels"]["wharf_role"] == "prefill"
    decode = groups["pd-d0"]
    assert decode["targets"] == ["10.0.0.8:8300"]
    assert decode["labels"]["__scheme__"] == "https"
    assert decode["labels"]["__metrics_path__"] == "/engine/metrics"
    assert all(isinstance(v, str) for g in groups.values() for v in g["labels"].values())


def test_only_ready_engines_with_a_metrics_page_are_targets(api, store):
    service = _deploy(SPEC)
    _instance(service, "tiny-0")
    _instance(service, "tiny-1", state="draining")
    _instance(_deploy(CUSTOM), "plain-0")  # a custom command: no metrics page known
    Instance.objects.create(  # a spec version no longer kept: nothing known of its engine
        service=service, name="tiny-old", runtime="process", url="http://127.0.0.1:1",
        spec_hash="gone", state="ready", node="n1",
    )  # fmt: skip
    names = [g["labels"]["wharf_instance"] for g in api.get("/api/v1/metrics/targets").json()]
    assert names == ["tiny-0"]


def test_staff_see_every_workspaces_targets(store):
    team = member(client_for("tom").user, "owner", "team")
    _instance(_deploy({**SPEC, "name": "theirs"}, team), "theirs-0")
    _instance(_deploy(SPEC), "tiny-0")
    staff = client_for("root", staff=True)
    groups = staff.get("/api/v1/metrics/targets").json()
    assert {(g["labels"]["wharf_instance"], g["labels"]["wharf_workspace"]) for g in groups} == {
        ("theirs-0", "team"), ("tiny-0", "default")}  # fmt: skip
    workspace_only = client_for("dev")
    assert [g["labels"]["wharf_instance"] for g in workspace_only.get(
        "/api/v1/metrics/targets").json()] == ["tiny-0"]  # fmt: skip


def test_the_openapi_schema_describes_both(store):
    schema = json.loads(APIClient().get(
        "/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content)  # fmt: skip
    service = schema["paths"]["/api/v1/services/{name}/metrics"]["get"]
    targets = schema["paths"]["/api/v1/metrics/targets"]["get"]
    assert service["operationId"] == "services_metrics"
    assert [p["name"] for p in service["parameters"] if p["in"] == "query"] == ["minutes"]
    assert targets["operationId"] == "metrics_targets"
    assert targets["responses"]["200"]["content"]["application/json"]["schema"]["type"] == "array"
