"""Malformed and absurd generation bodies, through a real gateway: a 4xx naming the field."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from gateway_support import (
    Deployed,
    Engine,
    Gateway,
    make_token,
    service,
    snapshot,
)

pytestmark = pytest.mark.timeout(30)


def _post(deployed: Deployed, http: httpx.Client, body: bytes, path: str) -> httpx.Response:
    return http.post(
        deployed.gateway.url + path,
        content=body,
        headers={"Authorization": f"Bearer {deployed.token}", "Content-Type": "application/json"},
    )


def _assert_invalid(response: httpx.Response, status: int, code: str, param: str | None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, param)
    assert error["message"]


@pytest.mark.parametrize("path", ["/v1/completions", "/api/predict/tiny-svc/v1/completions"])
def test_deeply_nested_body_is_400_not_500(
    deployed: Deployed, http: httpx.Client, path: str
) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    body = b'{"model": "tiny", "prompt": "x", "extra": ' + deep + b"}"
    _assert_invalid(_post(deployed, http, body, path), 400, "nesting_too_deep", None)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/predict/tiny-svc/v1/completions"])
def test_stream_as_a_string_is_400_naming_stream(
    deployed: Deployed, http: httpx.Client, path: str
) -> None:
    body = b'{"model": "tiny", "prompt": "x", "messages": [], "stream": "yes"}'
    _assert_invalid(_post(deployed, http, body, path), 400, "invalid_type", "stream")


@pytest.mark.parametrize(
    ("fields", "code", "param"),
    [
        ({"model": 42}, "invalid_type", "model"),
        ({"model": "m" * 5000}, "string_above_max_length", "model"),
        ({"model": "\udfff"}, "invalid_value", "model"),
        ({"stream": 1}, "invalid_type", "stream"),
        ({"stream": True, "stream_options": "usage"}, "invalid_type", "stream_options"),
        (
            {"stream": True, "stream_options": {"include_usage": "yes"}},
            "invalid_type",
            "stream_options.include_usage",
        ),
        ({"max_tokens": "16"}, "invalid_type", "max_tokens"),
        ({"max_tokens": 4.0}, "invalid_type", "max_tokens"),
        ({"max_tokens": True}, "invalid_type", "max_tokens"),
        ({"max_tokens": -1}, "integer_below_min_value", "max_tokens"),
        ({"max_tokens": 10**30}, "integer_above_max_value", "max_tokens"),
        ({"max_completion_tokens": "x"}, "invalid_type", "max_completion_tokens"),
    ],
)
def test_wrong_type_for_a_field_the_gateway_reads_is_400_naming_it(
    deployed: Deployed, http: httpx.Client, fields: dict[str, Any], code: str, param: str
) -> None:
    body = json.dumps({"model": "tiny", "prompt": "x", **fields}).encode()
    _assert_invalid(_post(deployed, http, body, "/v1/completions"), 400, code, param)


def test_fields_the_gateway_does_not_read_reach_the_engine_untouched(
    deployed: Deployed, http: httpx.Client
) -> None:
    fields = {"model": "tiny", "prompt": "x", "top_p": "two", "temperature": [1], "x": {"a": None}}
    response = http.post(
        deployed.gateway.url + "/v1/completions",
        json=fields,
        headers={"Authorization": f"Bearer {deployed.token}", "x-test-id": "untouched"},
    )
    assert response.status_code == 200
    assert deployed.engine.recorder.seen["untouched"].body == fields


def test_stream_with_null_stream_options_still_asks_for_usage(
    deployed: Deployed, http: httpx.Client
) -> None:
    fields = {"model": "tiny", "prompt": "x", "stream": True, "stream_options": None}
    response = http.post(
        deployed.gateway.url + "/v1/completions",
        json=fields,
        headers={"Authorization": f"Bearer {deployed.token}", "x-test-id": "null-options"},
    )
    assert response.status_code == 200
    seen = deployed.engine.recorder.seen["null-options"].body
    assert seen["stream_options"] == {"include_usage": True}
    # The usage event the gateway asked for itself is removed again.
    assert '"usage"' not in response.text


@pytest.fixture
def small_limit(start_gateway: Callable[..., Gateway], engines: list[Engine]) -> Deployed:
    token, digest = make_token()
    svc = service("tiny-svc", [engines[0].instance], [digest], models=("tiny",))
    return Deployed(start_gateway(snapshot(1, svc), max_body_bytes=1024), token, svc, engines[0])


def _padded(size: int) -> bytes:
    """A completion request of exactly `size` bytes."""
    body = b'{"model": "tiny", "prompt": ""}'
    return body[:-2] + b"x" * (size - len(body)) + body[-2:]


@pytest.mark.parametrize("path", ["/v1/completions", "/api/predict/tiny-svc/v1/completions"])
def test_body_at_the_size_limit_is_forwarded(
    small_limit: Deployed, http: httpx.Client, path: str
) -> None:
    assert _post(small_limit, http, _padded(1024), path).status_code == 200


@pytest.mark.parametrize(
    "path",
    ["/v1/completions", "/api/predict/tiny-svc/v1/completions", "/api/predict/tiny-svc/echo"],
)
def test_body_over_the_size_limit_is_413(
    small_limit: Deployed, http: httpx.Client, path: str
) -> None:
    response = _post(small_limit, http, _padded(1025), path)
    _assert_invalid(response, 413, "body_too_large", None)
    assert "WHARF_GATEWAY_MAX_BODY_BYTES" in response.json()["error"]["message"]


def test_chunked_body_over_the_size_limit_is_413(small_limit: Deployed, http: httpx.Client) -> None:
    """No Content-Length to go by: the body is counted as it arrives."""
    chunks = iter([_padded(1025)[:600], _padded(1025)[600:]])
    response = http.post(
        small_limit.gateway.url + "/v1/completions",
        content=chunks,
        headers={"Authorization": f"Bearer {small_limit.token}"},
    )
    _assert_invalid(response, 413, "body_too_large", None)
