"""Token usage counted into Redis (contracts.usage), read from answers as they pass through."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import httpx
import pytest
from gateway_support import (
    METRICS_AUTHORIZATION,
    Engine,
    Gateway,
    make_key,
    make_token,
    metric,
    openai_client,
    service,
    snapshot,
    unique,
    wait_until,
)

from contracts.routing import RoutedKey, RoutedService
from contracts.usage import SERVICE_TOKEN_ID

pytestmark = pytest.mark.timeout(30)


def deploy(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> tuple[Gateway, RoutedService, str, str]:
    """A service with one API key; returns the gateway, service, key token and key id."""
    token, digest = make_key()
    key_id = unique("k")
    svc = service(unique("svc"), [engines[0].instance], [], models=("m",))
    gateway = start_gateway(snapshot(1, svc, keys={digest: RoutedKey(key_id)}))
    return gateway, svc, token, key_id


TIMINGS = ("latency_ms", "ttft_ms")


def usage_of(gateway: Gateway, service: str, key_id: str) -> dict[str, int]:
    """Requests and tokens counted for the pair (timings are checked on their own)."""
    counted = gateway.usage().items()
    return {
        kind: n
        for (svc, key, kind), n in counted
        if (svc, key) == (service, key_id) and kind not in TIMINGS
    }


def timings_of(gateway: Gateway, service: str, key_id: str) -> dict[str, int]:
    counted = gateway.usage().items()
    return {kind: n for (svc, key, kind), n in counted if (svc, key) == (service, key_id)
            and kind in TIMINGS}  # fmt: skip


def events(text: str) -> list[dict[str, object]]:
    """The JSON events of an SSE body, without the closing [DONE]."""
    found = [e.removeprefix("data: ") for e in text.split("\n\n") if e]
    assert found[-1] == "[DONE]"
    return [json.loads(e) for e in found[:-1]]


def test_non_streamed_answer_counts_its_usage_per_key_and_service(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    gateway, svc, token, key_id = deploy(start_gateway, engines)
    with openai_client(gateway, token) as client:
        for _ in range(2):
            client.completions.create(model="m", prompt="three word prompt", max_tokens=4)
    expected = {"requests": 2, "prompt": 6, "completion": 8}
    assert wait_until(lambda: usage_of(gateway, svc.name, key_id) == expected)
    timings = timings_of(gateway, svc.name, key_id)  # sums over both requests, in ms
    assert 0 <= timings.get("ttft_ms", 0) <= timings.get("latency_ms", 0)

    text = gateway.metrics()
    assert (
        metric(text, "wharf_gateway_tokens_total", service=svc.name, kind="prompt", adapter="") == 6
    )
    assert (
        metric(text, "wharf_gateway_tokens_total", service=svc.name, kind="completion", adapter="")
        == 8
    )


def test_stream_usage_is_asked_of_the_engine_and_kept_from_a_client_that_did_not_ask(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    gateway, svc, token, key_id = deploy(start_gateway, engines)
    test_id = uuid.uuid4().hex
    response = http.post(
        gateway.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True},
        headers={"Authorization": f"Bearer {token}", "x-test-id": test_id},
    )
    seen = engines[0].recorder.seen[test_id].body
    assert seen["stream_options"] == {"include_usage": True}
    received = events(response.text)
    assert [e["choices"][0]["delta"]["content"] for e in received] == [  # type: ignore[index]
        f"engine-a-{i} " for i in range(3)
    ]
    assert all("usage" not in e for e in received)
    # The engine counts a chat prompt as the words of str(messages).
    prompt = len(str([{"role": "user", "content": "hi"}]).split())
    expected = {"requests": 1, "prompt": prompt, "completion": 3}
    assert wait_until(lambda: usage_of(gateway, svc.name, key_id) == expected)


def test_stream_usage_reaches_a_client_that_asked_for_it(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    gateway, svc, token, key_id = deploy(start_gateway, engines)
    response = http.post(
        gateway.url + "/v1/completions",
        json={
            "model": "m",
            "prompt": "x y",
            "stream": True,
            "max_tokens": 2,
            "stream_options": {"include_usage": True},
        },
        headers={"Authorization": f"Bearer {token}"},
    )
    received = events(response.text)
    assert received[-1]["choices"] == []
    assert received[-1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    expected = {"requests": 1, "prompt": 2, "completion": 2}
    assert wait_until(lambda: usage_of(gateway, svc.name, key_id) == expected)


def test_stream_options_of_the_client_are_kept_when_usage_is_added(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    gateway, _, token, _ = deploy(start_gateway, engines)
    test_id = uuid.uuid4().hex
    body = {"model": "m", "prompt": "x", "stream": True, "stream_options": {"extra": 1}}
    response = http.post(
        gateway.url + "/v1/completions",
        json=body,
        headers={"Authorization": f"Bearer {token}", "x-test-id": test_id},
    )
    assert all(e["choices"] for e in events(response.text))
    seen = engines[0].recorder.seen[test_id].body
    assert seen["stream_options"] == {"extra": 1, "include_usage": True}


def test_openai_client_stream_sees_no_usage_chunk_it_did_not_ask_for(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    gateway, svc, token, key_id = deploy(start_gateway, engines)
    with openai_client(gateway, token) as client:
        chunks = list(
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=True
            )
        )
    assert [c.choices[0].delta.content for c in chunks] == ["engine-a-0 ", "engine-a-1 "]
    assert wait_until(lambda: usage_of(gateway, svc.name, key_id).get("completion") == 2)


def test_service_token_calls_are_counted_under_the_service_token_id(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    svc = service(unique("svc"), [engines[0].instance], [digest])
    gateway = start_gateway(snapshot(1, svc))
    response = http.post(
        f"{gateway.url}/api/predict/{svc.name}/v1/completions",
        json={"prompt": "a b c", "max_tokens": 1},
        headers={"Authorization": token},
    )
    assert response.status_code == 200
    expected = {"requests": 1, "prompt": 3, "completion": 1}
    assert wait_until(lambda: usage_of(gateway, svc.name, SERVICE_TOKEN_ID) == expected)


def test_engine_errors_count_a_request_but_no_tokens(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    svc = service(unique("svc"), [engines[0].instance], [digest])
    gateway = start_gateway(snapshot(1, svc))
    response = http.post(
        f"{gateway.url}/api/predict/{svc.name}/echo/x?status=500",
        json={"prompt": "a b c"},
        headers={"Authorization": token},
    )
    assert response.status_code == 500
    assert wait_until(lambda: usage_of(gateway, svc.name, SERVICE_TOKEN_ID) == {"requests": 1})


def test_metrics_count_requests_latency_first_bytes_and_redis_health(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    gateway, svc, token, _ = deploy(start_gateway, engines)
    with openai_client(gateway, token) as client:
        client.completions.create(model="m", prompt="x", max_tokens=1)
    http.post(gateway.url + "/v1/completions", json={"model": "m", "prompt": "x"})  # 401

    response = http.get(gateway.url + "/metrics", headers=METRICS_AUTHORIZATION)
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    name = svc.name
    assert metric(text, "wharf_gateway_requests_total", service=name, status="200", adapter="") == 1
    assert metric(text, "wharf_gateway_request_duration_seconds_count", service=name) == 1
    assert (
        metric(text, "wharf_gateway_time_to_first_byte_seconds_count", service=name, adapter="")
        == 1
    )
    assert metric(text, "wharf_gateway_redis_up") == 1
    assert metric(text, "wharf_gateway_snapshot_version") == 1
    assert 0 <= metric(text, "wharf_gateway_snapshot_age_seconds") < 10
    assert 0 <= metric(text, "wharf_gateway_usage_unflushed_age_seconds") < 10  # Redis is up
    assert "wharf_gateway_upstream_errors_total" in text
    assert "wharf_gateway_rejections_total" in text
