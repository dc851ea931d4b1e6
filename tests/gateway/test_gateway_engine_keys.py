"""Engines get their own instance's key (contracts.engine_keys), never the caller's token."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace

import httpx
import pytest
from gateway_support import SECRET_KEY, Deployed, Engine, Gateway, make_token, service, snapshot
from gateway_support import unique as unique_name

from contracts.engine_keys import engine_key
from contracts.routing import PdRouting

pytestmark = pytest.mark.timeout(30)


def expected(engine: Engine) -> str:
    return f"Bearer {engine_key(SECRET_KEY, engine.name)}"


def assert_no_token(headers: dict[str, str], token: str) -> None:
    assert not [name for name, value in headers.items() if token in value]


def test_the_engine_gets_its_key_and_not_the_callers_token(
    deployed: Deployed, http: httpx.Client
) -> None:
    test_id = uuid.uuid4().hex
    answer = http.post(
        deployed.gateway.url + "/v1/completions",
        json={"model": "tiny", "prompt": "hi", "max_tokens": 2},
        headers={"Authorization": f"Bearer {deployed.token}", "x-test-id": test_id},
    )
    assert answer.status_code == 200, answer.text
    seen = deployed.engine.recorder.seen[test_id].headers
    assert seen["authorization"] == expected(deployed.engine)
    assert_no_token(seen, deployed.token)


def test_the_eas_form_sends_the_key_in_place_of_a_bare_token(
    deployed: Deployed, http: httpx.Client
) -> None:
    answer = http.post(
        deployed.gateway.url + "/api/predict/tiny-svc/echo/anything",
        content=b"{}",
        headers={"Authorization": deployed.token},  # EAS style: the bare token
    )
    assert answer.status_code == 200, answer.text
    seen = answer.json()["headers"]
    assert seen["authorization"] == expected(deployed.engine)
    assert_no_token(seen, deployed.token)


def test_each_prefill_decode_leg_carries_its_own_instances_key(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    prefill = replace(engines[0].instance, role="prefill")
    decode = replace(engines[1].instance, role="decode")
    svc = service(unique_name("pd"), [prefill, decode], [digest], models=("m",))
    gateway = start_gateway(snapshot(1, replace(svc, pd=PdRouting("ExampleConnector"))))
    test_id = uuid.uuid4().hex
    answer = http.post(
        gateway.url + "/v1/completions",
        json={"model": "m", "prompt": "hello there", "max_tokens": 3, "stream": True},
        headers={"Authorization": f"Bearer {token}", "x-test-id": test_id},
    )
    assert answer.status_code == 200 and answer.headers["x-wharf-instance"] == "engine-b"
    for engine in engines:  # engine-a took the prefill leg, engine-b the decode leg
        seen = engine.recorder.seen[test_id].headers
        assert seen["authorization"] == expected(engine)
        assert_no_token(seen, token)


def test_a_pod_gets_the_key_of_its_deployment_which_its_name_does_not_derive(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    """The pods of one Kubernetes Deployment share one key (their template's), so the
    snapshot names what it derives from; the snapshot goes through Redis as JSON."""
    token, digest = make_token()
    pod = replace(engines[0].instance, name="demo-6d5f-abcde", key="k8s/demo")
    svc = service(unique_name("k8s"), [pod], [digest], models=("tiny",))
    gateway = start_gateway(snapshot(1, svc))
    test_id = uuid.uuid4().hex
    answer = http.post(
        gateway.url + "/v1/completions",
        json={"model": "tiny", "prompt": "hi", "max_tokens": 2},
        headers={"Authorization": f"Bearer {token}", "x-test-id": test_id},
    )
    assert answer.status_code == 200, answer.text
    seen = engines[0].recorder.seen[test_id].headers
    assert seen["authorization"] == f"Bearer {engine_key(SECRET_KEY, 'k8s/demo')}"
    assert seen["authorization"] != f"Bearer {engine_key(SECRET_KEY, 'demo-6d5f-abcde')}"
