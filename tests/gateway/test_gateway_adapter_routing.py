"""LoRA adapters in the gateway, against the test engines: an adapter's calls go only to the
instances that have it loaded (workers.models.adapters says which), under the adapter's own name; a
503 adapter_not_loaded where none has; the engine's runtime LoRA routes are never forwarded."""

from __future__ import annotations

import uuid

import pytest
from gateway_support import assert_error, make_token, snapshot

from contracts.engine_routes import engine_route
from contracts.routing import RoutedInstance, RoutedService
from gateway.eas.paths import EnginePath, engine_path


def reaches(engine: str, tail: str) -> bool:
    """Whether a caller's EAS-form tail reaches the engine, as the gateway decides it."""
    path = engine_path(tail.split("?")[0])
    return isinstance(path, EnginePath) and engine_route(engine, path.path) is not None


def routed(engines, loaded: list[tuple[str, ...] | None]) -> tuple[RoutedService, str]:
    token, digest = make_token()
    instances = tuple(
        RoutedInstance(e.name, e.url, adapters=adapters)
        for e, adapters in zip(engines, loaded, strict=True)
    )
    svc = RoutedService("assistant", ("tiny",), frozenset([digest]), instances, rate_limit=0,
                        adapters=("sql", "chat"), engine="vllm")  # fmt: skip
    return svc, token


def call(http, gateway, token: str, model: str, test_id: str):
    headers = {"Authorization": f"Bearer {token}", "x-test-id": test_id}
    body = {"model": model, "prompt": "hi", "max_tokens": 2}
    return http.post(f"{gateway.url}/v1/completions", json=body, headers=headers)


def test_an_adapter_goes_only_where_it_is_loaded_under_its_own_name(start_gateway, engines, http):
    svc, token = routed(engines, [("sql",), ("sql", "chat")])
    gateway = start_gateway(snapshot(1, svc))
    ids = [uuid.uuid4().hex for _ in range(6)]
    for test_id in ids:
        assert call(http, gateway, token, "tiny:chat", test_id).status_code == 200
    a, b = engines
    assert not set(ids) & set(a.recorder.seen)
    assert all(b.recorder.seen[i].body["model"] == "chat" for i in ids)
    # The base model goes to either.
    spread = [uuid.uuid4().hex for _ in range(8)]
    for test_id in spread:
        assert call(http, gateway, token, "tiny", test_id).status_code == 200
    assert set(spread) & set(a.recorder.seen) and set(spread) & set(b.recorder.seen)


def test_an_adapter_no_instance_has_loaded_is_a_503(start_gateway, engines, http):
    svc, token = routed(engines, [("sql",), ()])
    gateway = start_gateway(snapshot(1, svc))
    answer = call(http, gateway, token, "tiny:chat", uuid.uuid4().hex)
    assert_error(answer, 503, "server_error", "adapter_not_loaded")
    assert answer.headers["retry-after"] == "5"
    # Instances whose node does not track adapters (None) serve every one of the spec's.
    svc, token = routed(engines, [None, ()])
    gateway = start_gateway(snapshot(1, svc))
    assert call(http, gateway, token, "tiny:chat", uuid.uuid4().hex).status_code == 200


@pytest.mark.parametrize(("tail", "blocked"), [
    ("v1/load_lora_adapter", True), ("v1/unload_lora_adapter?x=1", True),
    ("v1/load%5Flora%5Fadapter", True), ("v1//unload_lora_adapter", True),
    ("v1/x/../load_lora_adapter", True), ("adapters", True), ("adapters/sql", True),
    ("%2Fadapters", True), ("v1/completions", False), ("v1/models", False),
    ("adapters_list", False), ("v1/load_lora_adapters", False),
])  # fmt: skip
def test_the_engines_runtime_lora_routes_are_the_nodes_alone(tail, blocked):
    assert reaches("custom", tail) is not blocked  # a custom engine's other routes are open
    # vLLM's are an allow-list of inference routes, which the LoRA routes are not.
    assert reaches("vllm", tail) is (tail in ("v1/completions", "v1/models"))


def test_a_caller_never_reaches_them(start_gateway, engines, http):
    svc, token = routed(engines, [None, None])
    gateway = start_gateway(snapshot(1, svc))
    test_id = uuid.uuid4().hex
    answer = http.post(f"{gateway.url}/api/predict/assistant/v1/load_lora_adapter",
                       json={"lora_name": "x", "lora_path": "/etc"},
                       headers={"Authorization": token, "x-test-id": test_id})  # fmt: skip
    assert_error(answer, 404, "invalid_request_error", "route_not_found")
    assert all(test_id not in e.recorder.seen for e in engines)
