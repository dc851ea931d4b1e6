"""Which engine routes the EAS form reaches (contracts.engine_routes), matched on the path as
the engine reads it (gateway.eas.paths), and read as the OpenAI form reads them: the same
admission (max_tokens times n or best_of) and the same metering (the Responses API's too)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from gateway_support import (
    Engine,
    Gateway,
    assert_error,
    make_key,
    service,
    snapshot,
    unique,
    wait_until,
)

from contracts.engine_routes import (
    ALLOWED,
    GENERATION,
    LISTING,
    OPAQUE,
    POOLING,
    RESPONSES,
    engine_route,
)
from contracts.engines import MODULES
from contracts.routing import RoutedKey, RoutedService
from gateway.eas.paths import EnginePath, PathRefusal, engine_path

pytestmark = pytest.mark.timeout(60)

# -- the table and the paths, pure ---------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "path", "kind"),
    [
        ("vllm", "/v1/completions", GENERATION),
        ("vllm-cpu", "/v1/chat/completions", GENERATION),
        ("vllm-ascend", "/v1/responses", RESPONSES),
        ("vllm", "/v1/embeddings", POOLING),
        ("vllm", "/score", POOLING),
        ("vllm", "/v2/rerank", POOLING),
        ("vllm", "/v1/models", LISTING),
        ("vllm", "/invocations", None),  # dispatches by the body's shape: not metered as such
        ("vllm", "/tokenize", None),
        ("vllm", "/detokenize", None),
        ("vllm", "/collective_rpc", None),
        ("vllm", "/v1/load_lora_adapter", None),
        ("vllm", "/sleep", None),
        ("vllm", "/metrics", None),
        ("vllm", "/v1/responses/resp-1", None),
        ("vllm", "/", None),
        ("tgi", "/v1/chat/completions", GENERATION),
        ("tgi", "/info", LISTING),
        ("tgi", "/generate", None),  # no usage unless asked: not metered
        ("tgi", "/v1/embeddings", None),
        ("bladellm", "/v1/completions", GENERATION),
        ("bladellm", "/v1/responses", None),
        ("paddlenlp", "/v1/chat/completions", GENERATION),
        ("paddlenlp", "/health", None),
        ("custom", "/v1/completions", GENERATION),
        ("custom", "/v1/responses", RESPONSES),
        ("custom", "/", OPAQUE),
        ("custom", "/predict/my-model", OPAQUE),
        ("custom", "/tokenize", OPAQUE),
        ("custom", "/collective_rpc", None),
        ("custom", "/Collective_RPC/x", None),
        ("custom", "/v1/unload_lora_adapter", None),
        ("custom", "/update_weights_from_disk", None),
        ("custom", "/metrics", None),
        ("custom", "/metricsx", OPAQUE),
        ("", "/v1/embeddings", POOLING),  # an engine not named: the OpenAI form's routes
        ("", "/v1/responses", None),
        ("sglang", "/flush_cache", None),  # an engine this gateway does not know
    ],
)
def test_each_engine_reaches_its_inference_routes_only(
    engine: str, path: str, kind: str | None
) -> None:
    route = engine_route(engine, path)
    assert (route.kind if route else None) == kind


def test_every_engine_wharf_renders_has_its_routes() -> None:
    assert set(ALLOWED) | {"custom"} == set(MODULES)


@pytest.mark.parametrize(
    ("raw", "path", "trailing_slash"),
    [
        ("v1/completions", "/v1/completions", False),
        ("v1/%63ompletions", "/v1/completions", False),
        ("v1/%63%6F%6D%70letions", "/v1/completions", False),
        ("v1//completions", "/v1/completions", False),
        ("/v1/completions", "/v1/completions", False),
        ("v1/./completions/", "/v1/completions", True),
        ("v1/x/../completions", "/v1/completions", False),
        ("v1/%2E%2E/v1/completions", "/v1/completions", False),
        ("../../v1/completions", "/v1/completions", False),
        ("", "/", False),
        ("a%20b/%C3%A9", "/a b/é", False),
    ],
)
def test_paths_are_decoded_once_and_normalised(raw: str, path: str, trailing_slash: bool) -> None:
    assert engine_path(raw) == EnginePath(path, trailing_slash)


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ("v1%2Fcompletions", "%2F"),
        ("v1%2fcompletions", "%2F"),
        ("v1%5Ccompletions", "%5C"),
        ("v1/%2563ompletions", "%25"),
        ("v1/completions;x=1", "';'"),
        ("v1/completions%3B", "%3B"),
        ("v1\\completions", "'\\'"),
        ("v1/%zzcompletions", "two hexadecimal digits"),
        ("v1/completions%4", "two hexadecimal digits"),
        ("v1/completions%00", "control character"),
        ("v1/%0Acompletions", "control character"),
        ("v1/%C3completions", "UTF-8"),
        ("v1/complétions", "ASCII"),
    ],
)
def test_paths_a_server_could_read_otherwise_are_refused(raw: str, named: str) -> None:
    refused = engine_path(raw)
    assert isinstance(refused, PathRefusal) and named in refused.reason


def test_the_engine_is_called_on_the_normalised_path_encoded_again() -> None:
    path = engine_path("echo//a%20b/./%C3%A9/")
    assert isinstance(path, EnginePath)
    assert path.target(keep_trailing_slash=True) == "/echo/a%20b/%C3%A9/"
    assert path.target(keep_trailing_slash=False) == "/echo/a%20b/%C3%A9"


# -- through the gateway -------------------------------------------------------------------


def deploy(
    start_gateway: Callable[..., Gateway], engine: Engine, kind: str = "vllm", **key: Any
) -> tuple[Gateway, RoutedService, str, str]:
    """A service of engine `kind` on the test engine, with one API key (limits in `key`)."""
    token, digest = make_key()
    key_id = unique("k")
    svc = service(unique("svc"), [engine.instance], [], models=("m",), engine=kind)
    gateway = start_gateway(snapshot(1, svc, keys={digest: RoutedKey(key_id, **key)}))
    return gateway, svc, token, key_id


def predict(
    gateway: Gateway, svc: RoutedService, token: str, tail: str, body: dict | None = None, **kw
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", "x-test-id": kw.pop("test_id", "")}
    method = kw.pop("method", "POST")
    with httpx.Client(timeout=10, trust_env=False) as client:
        return client.request(
            method, f"{gateway.url}/api/predict/{svc.name}/{tail}", json=body, headers=headers
        )


def usage_of(gateway: Gateway, svc: RoutedService, key_id: str) -> dict[str, int]:
    kinds = ("requests", "prompt", "completion")
    counted = gateway.usage().items()
    return {kind: n for (name, key, kind), n in counted
            if (name, key) == (svc.name, key_id) and kind in kinds}  # fmt: skip


@pytest.mark.parametrize(
    ("engine", "tail"),
    [
        ("vllm", "invocations"),
        ("vllm", "tokenize"),
        ("vllm", "collective_rpc"),
        ("vllm", "v1//load_lora_adapter"),
        ("vllm", "sleep?level=1"),
        ("custom", "collective_rpc"),
        ("custom", "COLLECTIVE_RPC"),
        ("custom", "x/%2e%2E/collective_rpc/"),
        ("custom", "%63ollective_rpc"),
    ],
)
def test_routes_outside_the_engines_allow_list_are_the_gateways_404(
    start_gateway: Callable[..., Gateway], engines: list[Engine], engine: str, tail: str
) -> None:
    gateway, svc, token, _ = deploy(start_gateway, engines[0], engine)
    answer = predict(gateway, svc, token, tail, {"prompt": "x", "method": "x"})
    assert_error(answer, 404, "invalid_request_error", "route_not_found")
    assert svc.name in answer.json()["error"]["message"]


def test_a_route_the_engine_takes_by_another_method_is_405(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    gateway, svc, token, _ = deploy(start_gateway, engines[0])
    answer = predict(gateway, svc, token, "v1/completions", method="GET")
    assert_error(answer, 405, "invalid_request_error", "method_not_allowed")
    assert answer.headers["allow"] == "POST"


@pytest.mark.parametrize("tail", ["v1%2Fcompletions", "v1/%2563ompletions", "v1/completions;a"])
def test_a_path_the_engine_could_read_otherwise_is_400(
    start_gateway: Callable[..., Gateway], engines: list[Engine], tail: str
) -> None:
    gateway, svc, token, _ = deploy(start_gateway, engines[0])
    assert_error(predict(gateway, svc, token, tail, {}), 400, "invalid_request_error",
                 "invalid_path")  # fmt: skip


# Dots encoded: httpx resolves plain ones itself before sending.
@pytest.mark.parametrize(
    "tail", ["v1/%63ompletions", "v1/x/%2E%2E/completions", "v1//completions/"]
)
def test_an_encoded_or_dotted_path_is_admitted_as_the_route_it_reaches(
    start_gateway: Callable[..., Gateway], engines: list[Engine], tail: str
) -> None:
    gateway, svc, token, key_id = deploy(start_gateway, engines[0], tpm=200)
    # max_tokens alone is past the key's tokens per minute: refused before the engine.
    refused = predict(gateway, svc, token, tail, {"prompt": "x", "max_tokens": 500})
    assert_error(refused, 429, "tokens", "rate_limit_exceeded")
    test_id = uuid.uuid4().hex
    answer = predict(gateway, svc, token, tail, {"prompt": "a b", "max_tokens": 4}, test_id=test_id)
    assert answer.status_code == 200, answer.text
    assert engines[0].recorder.seen[test_id].body["max_tokens"] == 4  # the engine's route ran
    expected = {"requests": 1, "prompt": 2, "completion": 4}  # the refused one ran nothing
    assert wait_until(lambda: usage_of(gateway, svc, key_id) == expected)


@pytest.mark.parametrize("form", ["openai", "eas"])
@pytest.mark.parametrize("sequences", [{"n": 4}, {"best_of": 4}, {"n": 2, "best_of": 4}])
def test_every_sequence_a_request_asks_for_is_charged_in_advance(
    start_gateway: Callable[..., Gateway], engines: list[Engine], form: str, sequences: dict
) -> None:
    # 4 sequences of 50 tokens are past a tpm of 150, though one of them is not.
    gateway, svc, token, _ = deploy(start_gateway, engines[0], tpm=150)
    body = {"model": "m", "prompt": "x", "max_tokens": 50, **sequences}
    if form == "eas":
        answer = predict(gateway, svc, token, "v1/completions", body)
    else:
        answer = httpx.post(gateway.url + "/v1/completions", json=body, trust_env=False,
                            headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert_error(answer, 429, "tokens", "rate_limit_exceeded")
    assert answer.headers["x-should-retry"] == "false"  # it never fits


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("form", ["openai", "eas"])
def test_responses_api_calls_are_admitted_and_metered(
    start_gateway: Callable[..., Gateway], engines: list[Engine], form: str, stream: bool
) -> None:
    gateway, svc, token, key_id = deploy(start_gateway, engines[0], tpm=300)
    body = {"model": "m", "input": "four words of input", "max_output_tokens": 5, "stream": stream}
    test_id = uuid.uuid4().hex
    headers = {"Authorization": f"Bearer {token}", "x-test-id": test_id}
    with httpx.Client(timeout=10, trust_env=False, headers=headers) as client:
        url = gateway.url + ("/v1/responses" if form == "openai" else
                             f"/api/predict/{svc.name}/v1/responses")  # fmt: skip
        too_many = client.post(url, json={**body, "max_output_tokens": 400})
        answer = client.post(url, json=body)
    assert_error(too_many, 429, "tokens", "rate_limit_exceeded")
    assert answer.status_code == 200, answer.text
    # Nothing is added to a Responses call: it reports its usage unasked.
    assert engines[0].recorder.seen[test_id].body == body
    if stream:
        assert b"response.completed" in answer.content
    expected = {"requests": 1, "prompt": 4, "completion": 5}
    assert wait_until(lambda: usage_of(gateway, svc, key_id) == expected)


def test_a_custom_engines_own_routes_are_forwarded(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    gateway, svc, token, _ = deploy(start_gateway, engines[0], "custom")
    answer = predict(gateway, svc, token, "echo/anything/", {"free": "form"})
    assert answer.status_code == 200
    assert answer.json()["raw_path"] == "/echo/anything/"
    assert json.loads(answer.json()["body"]) == {"free": "form"}
