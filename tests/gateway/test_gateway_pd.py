"""Prefill/decode routing: the gateway sends prefill a one-token leg, then decode the request."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace

import httpx
import pytest
from gateway_support import Engine, Gateway, make_token, service, snapshot, unique

from contracts.routing import PdRouting, RoutedService

pytestmark = pytest.mark.timeout(30)


def deploy(start_gateway: Callable[..., Gateway], engines: list[Engine], **pd) -> tuple:
    """engine-a is the prefill instance, engine-b the decode instance."""
    token, digest = make_token()
    prefill = replace(engines[0].instance, role="prefill")
    decode = replace(engines[1].instance, role="decode")
    svc = service(unique("pd"), [prefill, decode], [digest], models=("m",))
    svc = replace(svc, pd=PdRouting("ExampleConnector", **pd))
    return start_gateway(snapshot(1, svc)), svc, token


def call(gateway: Gateway, token: str, test_id: str, **body) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/completions",
        json={"model": "m", "prompt": "hello there", "max_tokens": 5, **body},
        headers={"Authorization": f"Bearer {token}", "x-test-id": test_id},
        timeout=10,
        trust_env=False,
    )


def test_prefill_gets_one_token_then_decode_answers(start_gateway, engines):
    gateway, _, token = deploy(start_gateway, engines)
    test_id = uuid.uuid4().hex
    answer = call(gateway, token, test_id, stream=True)
    assert answer.status_code == 200
    assert answer.headers["x-wharf-instance"] == "engine-b"  # decode answered
    prefill = engines[0].recorder.seen[test_id].body
    decode = engines[1].recorder.seen[test_id].body
    assert (prefill["max_tokens"], prefill["stream"]) == (1, False)
    assert engines[0].recorder.seen[test_id].headers["content-type"] == "application/json"
    assert (decode["max_tokens"], decode["stream"]) == (5, True)
    assert "data: [DONE]" in answer.text


def test_no_prefill_instance_is_a_clear_503(start_gateway, engines):
    gateway, svc, token = deploy(start_gateway, engines)
    only_decode = RoutedService(**{**svc.__dict__, "instances": svc.instances[1:]})
    gateway.publish(snapshot(2, only_decode))
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        answer = call(gateway, token, uuid.uuid4().hex)
        if answer.status_code == 503:
            break
        time.sleep(0.1)
    assert answer.json()["error"]["code"] == "no_prefill_instance"


def test_decode_serves_alone_when_the_spec_allows_it(start_gateway, engines):
    gateway, svc, token = deploy(start_gateway, engines, on_prefill_failure="decode_only")
    broken = replace(svc.instances[0], url="http://127.0.0.1:9")  # nothing listens there
    gateway.publish(snapshot(2, replace(svc, instances=(broken, svc.instances[1]))))
    time.sleep(1)
    test_id = uuid.uuid4().hex
    answer = call(gateway, token, test_id)
    assert answer.status_code == 200 and answer.headers["x-wharf-instance"] == "engine-b"
    assert engines[1].recorder.seen[test_id].body["max_tokens"] == 5
