"""Fuzzing the services API (hypothesis, fixed seed, bounded): valid specs with a few of their
fields replaced by arbitrary JSON, unknown fields added, values huge or long or of the wrong
type. Never a 5xx; a 4xx names a field and writes nothing; whatever is accepted can be read,
previewed, routed, updated, stopped and deleted, and the reconciler removes it."""

from __future__ import annotations

import copy
import itertools

import pytest
from django.contrib.auth import get_user_model
from hypothesis import event, given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from controlplane.services.models import Event, Service
from controlplane.services.routing import build_snapshot
from controlplane.tokens.models import ApiToken
from tests.api_support import member
from tests.fuzz_support import fuzz
from tests.fuzz_support import json_values as any_json
from workers.fleet import FleetSettings
from workers.scheduling.scheduler import schedule

pytestmark = pytest.mark.django_db

BASES = [
    {"name": "llm", "llm": {"engine": "vllm-cpu", "model": "tiny-llama", "max_model_len": 512,
                            "options": {"--block-size": 16}},
     "metadata": {"instance": 1, "rpc": {"rate_limit": 5, "keepalive": 1000},
                  "resource": "default", "termination_grace_period": 30},
     "rolling_strategy": {"max_surge": "25%", "max_unavailable": 0},
     "health_check": {"path": "/health", "period_seconds": 5, "liveness": {"timeout_seconds": 2}}},
    {"name": "custom", "containers": [{"image": "img:1", "command": "serve", "port": 8000,
                                       "env": [{"name": "A", "value": "b"}]}],
     "storage": [{"mount_path": "/dev/shm", "empty_dir": {"medium": "memory"}}]},
    {"name": "pd", "llm": {"engine": "vllm-cpu", "model": "tiny-llama",
                           "pd": {"prefill": {"instance": 1}, "decode": {"instance": 2}}}},
]  # fmt: skip
# Where mutations land: every section and many leaves of the bases, and new names beside them.
PATHS = [
    (), ("name",), ("metadata",), ("metadata", "instance"), ("metadata", "gpu"),
    ("metadata", "cpu"), ("metadata", "memory"), ("metadata", "shm_size"), ("metadata", "rpc"),
    ("metadata", "rpc", "rate_limit"), ("metadata", "rpc", "keepalive"),
    ("metadata", "rpc", "max_queue_size"), ("llm",), ("llm", "engine"), ("llm", "model"),
    ("llm", "max_model_len"), ("llm", "options"), ("llm", "options", "--block-size"),
    ("llm", "extra_args"), ("llm", "served_model_name"), ("llm", "speculative"),
    ("llm", "pd"), ("llm", "pd", "prefill", "instance"), ("llm", "pd", "kv_connector"),
    ("containers",), ("containers", 0, "port"), ("containers", 0, "env"),
    ("containers", 0, "command"), ("storage",), ("storage", 0, "empty_dir", "size_limit"),
    ("rolling_strategy",), ("rolling_strategy", "max_surge"),
    ("rolling_strategy", "max_unavailable"), ("metadata", "resource"),
    ("metadata", "termination_grace_period"), ("health_check",), ("health_check", "path"),
    ("health_check", "period_seconds"), ("health_check", "timeout_seconds"),
    ("health_check", "startup_timeout_seconds"), ("health_check", "liveness"),
    ("health_check", "liveness", "period_seconds"), ("health_check", "liveness", "path"),
]  # fmt: skip

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
    st.sampled_from(["1", "512", "yes", "tiny-llama", "oss://bucket/m/", "/models/x", "--x"]),
    st.text(min_size=1500, max_size=1600), st.just("x" * 70_000),
)  # fmt: skip
json_values = any_json(scalars, max_size=3)
mutations = st.lists(st.tuples(st.sampled_from(PATHS), json_values), min_size=1, max_size=3)
NAMES = itertools.count()


def settable(target, key) -> bool:
    """Whether target[key] can be set: any key of a dict, an existing index of a list."""
    if isinstance(target, dict):
        return True
    return isinstance(target, list) and isinstance(key, int) and key < len(target)


def mutated(base: dict, changes) -> dict:
    spec = copy.deepcopy(base)
    for path, value in changes:
        target = spec
        for step in path[:-1]:
            if not settable(target, step):
                break
            target = target.setdefault(step, {}) if isinstance(target, dict) else target[step]
        if path and settable(target, path[-1]):
            target[path[-1]] = value
    if isinstance(spec.get("name"), str) and spec["name"] in {b["name"] for b in BASES}:
        spec["name"] = f"{spec['name']}-{next(NAMES)}"  # fresh, so a valid spec is a 201
    return spec


@pytest.fixture
def api() -> APIClient:
    user = get_user_model().objects.get_or_create(username="fuzzer")[0]
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user, member(user, 'owner'), 'fuzz')}"
    )
    return client


def assert_names_a_field(response) -> None:
    body = response.json()
    assert body["detail"] and (body.get("errors") or response.status_code != 400), body


def accepted_lifecycle(api, spec: dict) -> None:
    """What an accepted spec must allow, ending with the reconciler removing it."""
    name = spec["name"]
    assert api.get(f"/api/v1/services/{name}").status_code == 200
    assert name in build_snapshot().services
    assert api.put(f"/api/v1/services/{name}", spec, format="json").status_code == 200
    assert api.post(f"/api/v1/services/{name}/stop").status_code == 202
    assert api.get(f"/api/v1/services/{name}/events?limit=5").status_code == 200
    assert api.delete(f"/api/v1/services/{name}").status_code == 202
    schedule(name, FleetSettings())
    assert not Service.objects.filter(name=name).exists()


@fuzz(300)
@given(base=st.sampled_from(BASES), changes=mutations)
def test_no_spec_gets_a_5xx_and_every_accepted_one_can_be_deleted(api, tmp_path, base, changes):
    spec = mutated(base, changes)
    services, events = Service.objects.count(), Event.objects.count()
    preview = api.post("/api/v1/services/preview", spec, format="json")
    assert preview.status_code < 500, preview.content
    created = api.post("/api/v1/services", spec, format="json")
    assert created.status_code < 500, created.content
    event(f"status {created.status_code}")
    if created.status_code == 201:
        assert preview.status_code == 200, preview.content
        accepted_lifecycle(api, spec)
    else:
        # 400: a bad spec; 403: a capability the workspace is not granted (contracts.grants),
        # which the preview (no workspace) does not judge; each names its fields.
        assert created.status_code in (400, 403), created.content
        assert_names_a_field(created)
        if created.status_code == 403:
            assert preview.status_code == 200 and created.json()["errors"], created.content
        assert (Service.objects.count(), Event.objects.count()) == (services, events)
