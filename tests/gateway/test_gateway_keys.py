"""API keys: calling with one, and the refusals for expired, out-of-scope and revoked keys."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import openai
import pytest
from gateway_support import (
    Engine,
    Gateway,
    assert_error,
    make_key,
    make_token,
    openai_client,
    service,
    snapshot,
    unique,
    wait_until,
)

from contracts.routing import RoutedKey, RoutedService

pytestmark = pytest.mark.timeout(30)


def complete(http: httpx.Client, gateway: Gateway, token: str, model: str) -> httpx.Response:
    return http.post(
        gateway.url + "/v1/completions",
        json={"model": model, "prompt": "x", "max_tokens": 2},
        headers={"Authorization": f"Bearer {token}"},
    )


def two_services(engines: list[Engine]) -> tuple[RoutedService, RoutedService]:
    _, digest = make_token()
    return (
        service(unique("allowed"), [engines[0].instance], [digest], models=("m-allowed",)),
        service(unique("other"), [engines[1].instance], [digest]),
    )


def test_key_scoped_to_a_service_calls_it_and_lists_only_it(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    allowed, other = two_services(engines)
    token, digest = make_key()
    key = RoutedKey(unique("k"), services=frozenset({allowed.name}))
    gateway = start_gateway(snapshot(1, allowed, other, keys={digest: key}))

    assert complete(http, gateway, token, "m-allowed").status_code == 200
    with openai_client(gateway, token) as client:
        assert [m.id for m in client.models.list().data] == ["m-allowed"]


def test_key_for_every_service_reaches_each(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    allowed, other = two_services(engines)
    token, digest = make_key()
    gateway = start_gateway(snapshot(1, allowed, other, keys={digest: RoutedKey(unique("k"))}))
    assert complete(http, gateway, token, allowed.name).status_code == 200
    assert complete(http, gateway, token, other.name).status_code == 200


def test_key_outside_its_scope_is_403_in_eas_form_naming_the_service(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    allowed, other = two_services(engines)
    token, digest = make_key()
    key = RoutedKey(unique("k"), services=frozenset({allowed.name}))
    gateway = start_gateway(snapshot(1, allowed, other, keys={digest: key}))

    response = http.post(
        f"{gateway.url}/api/predict/{other.name}/v1/completions",
        json={"prompt": "x"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert_error(response, 403, "invalid_request_error", "key_not_allowed")
    assert other.name in response.json()["error"]["message"]


def test_key_outside_its_scope_is_openais_model_not_found_in_openai_form(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    # As OpenAI answers for a model a key has no access to: the same 404 as for no model.
    allowed, other = two_services(engines)
    token, digest = make_key()
    key = RoutedKey(unique("k"), services=frozenset({allowed.name}))
    gateway = start_gateway(snapshot(1, allowed, other, keys={digest: key}))

    response = complete(http, gateway, token, other.name)
    assert_error(response, 404, "invalid_request_error", "model_not_found", param="model")
    with (
        openai_client(gateway, token) as client,
        pytest.raises(openai.NotFoundError, match="does not exist or your token may not call"),
    ):
        client.completions.create(model=other.name, prompt="x")


def test_expired_key_is_401_saying_when_it_expired(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    allowed, _ = two_services(engines)
    token, digest = make_key()
    key = RoutedKey(unique("k"), expires_at=time.time() - 5)
    gateway = start_gateway(snapshot(1, allowed, keys={digest: key}))

    response = complete(http, gateway, token, allowed.name)
    assert_error(response, 401, "invalid_request_error", "invalid_api_key")
    assert "expired at" in response.json()["error"]["message"]
    assert response.headers["www-authenticate"] == "Bearer"
    models = http.get(gateway.url + "/v1/models", headers={"Authorization": f"Bearer {token}"})
    assert_error(models, 401, "invalid_request_error", "invalid_api_key")
    assert "expired at" in models.json()["error"]["message"]


def test_key_expiring_while_the_gateway_runs_is_refused_from_then_on(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    allowed, _ = two_services(engines)
    token, digest = make_key()
    key = RoutedKey(unique("k"), expires_at=time.time() + 0.5)
    gateway = start_gateway(snapshot(1, allowed, keys={digest: key}))
    assert complete(http, gateway, token, allowed.name).status_code == 200
    assert wait_until(lambda: complete(http, gateway, token, allowed.name).status_code == 401)


def test_revoked_key_is_refused_within_a_second_of_the_next_snapshot(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    allowed, _ = two_services(engines)
    token, digest = make_key()
    kept_token, kept_digest = make_key()
    keys = {digest: RoutedKey(unique("k")), kept_digest: RoutedKey(unique("kept"))}
    # Polling every 60 s: only the pub/sub message can explain a prompt refusal.
    gateway = start_gateway(snapshot(1, allowed, keys=keys), poll=60)
    assert complete(http, gateway, token, allowed.name).status_code == 200

    gateway.publish(snapshot(2, allowed, keys={kept_digest: keys[kept_digest]}))
    started = time.monotonic()
    assert wait_until(lambda: complete(http, gateway, token, allowed.name).status_code == 401)
    assert time.monotonic() - started < 1.0
    assert_error(
        complete(http, gateway, token, allowed.name),
        401,
        "invalid_request_error",
        "invalid_api_key",
    )
    assert complete(http, gateway, kept_token, allowed.name).status_code == 200
