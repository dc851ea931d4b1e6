"""Requests through a real gateway to a real engine: routing, auth and error answers."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import openai
import pytest
from gateway_support import (
    SECRET_KEY,
    Deployed,
    Engine,
    Gateway,
    assert_error,
    make_token,
    openai_client,
    service,
    snapshot,
)

from contracts.engine_keys import engine_key

pytestmark = pytest.mark.timeout(30)


def test_completion_returns_engine_answer_with_usage(deployed: Deployed) -> None:
    with openai_client(deployed.gateway, deployed.token) as client:
        completion = client.completions.create(model="tiny", prompt="hello there", max_tokens=4)
    assert completion.choices[0].text == "engine-a-0 engine-a-1 engine-a-2 engine-a-3 "
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (2, 4)


def test_chat_completion_routes_by_model(deployed: Deployed) -> None:
    with openai_client(deployed.gateway, deployed.token) as client:
        chat = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    assert chat.choices[0].message.content == "engine-a-0 engine-a-1 "


@pytest.mark.parametrize("model", ["tiny", "tiny-alias", "tiny-svc"])
def test_model_names_service_by_served_name_or_service_name(
    deployed: Deployed, http: httpx.Client, model: str
) -> None:
    response = http.post(
        deployed.gateway.url + "/v1/completions",
        json={"model": model, "prompt": "x"},
        headers={"Authorization": f"Bearer {deployed.token}"},
    )
    assert response.status_code == 200
    assert response.headers["x-wharf-instance"] == "engine-a"
    assert response.headers["content-type"] == "application/json"
    # The engine knows only served names: a service name is swapped for the first of them.
    assert response.json()["model"] == {"tiny-svc": "tiny"}.get(model, model)


def test_eas_path_forwards_path_query_and_body_but_not_the_token(
    deployed: Deployed, http: httpx.Client
) -> None:
    response = http.post(
        deployed.gateway.url + "/api/predict/tiny-svc/echo/v1/thing?a=1&b=two",
        content=b'{"free": "form"}',
        headers={
            "Authorization": deployed.token,
            "Content-Type": "application/json",
            "Connection": "keep-alive, x-hop",
            "X-Hop": "for this connection only",
            "Proxy-Authorization": "Basic c2VjcmV0",
            "X-Custom": "kept",
            "Expect": "100-continue",
        },
    )
    assert response.status_code == 200
    seen = response.json()
    assert seen["headers"]["x-custom"] == "kept"
    assert not {"x-hop", "proxy-authorization", "expect"} & set(seen["headers"])
    # The engine's own server/date headers are replaced, not duplicated.
    assert len(response.headers.get_list("date")) == 1
    assert response.headers.get_list("server") == ["uvicorn"]
    assert (seen["method"], seen["path"], seen["query"]) == ("POST", "/echo/v1/thing", "a=1&b=two")
    assert seen["body"] == '{"free": "form"}'
    assert seen["headers"]["content-type"] == "application/json"
    # The engine gets its instance's own key in place of the caller's token.
    assert seen["headers"]["authorization"] == f"Bearer {engine_key(SECRET_KEY, 'engine-a')}"
    assert seen["headers"]["x-forwarded-for"] == "127.0.0.1"
    assert response.headers["x-wharf-instance"] == "engine-a"


def test_eas_path_is_forwarded_percent_encoded_as_it_was_matched(
    deployed: Deployed, http: httpx.Client
) -> None:
    response = http.get(
        deployed.gateway.url + "/api/predict/tiny-svc/echo//a%20b/./%C3%A9/x/../y/",
        headers={"Authorization": deployed.token},
    )
    # Decoded, normalised, encoded again; a custom engine's route keeps its trailing slash.
    assert response.json()["raw_path"] == "/echo/a%20b/%C3%A9/y/"
    assert response.json()["path"] == "/echo/a b/é/y/"


def test_passes_through_engine_status_and_content_type(
    deployed: Deployed, http: httpx.Client
) -> None:
    response = http.post(
        deployed.gateway.url + "/api/predict/tiny-svc/teapot",
        headers={"Authorization": deployed.token},
    )
    assert response.status_code == 418
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.text == "short and stout"


@pytest.mark.parametrize("scheme", ["Bearer ", "bearer ", ""])
def test_accepts_token_with_or_without_bearer_scheme(
    deployed: Deployed, http: httpx.Client, scheme: str
) -> None:
    response = http.post(
        deployed.gateway.url + "/api/predict/tiny-svc/v1/completions",
        json={"prompt": "x"},
        headers={"Authorization": scheme + deployed.token},
    )
    assert response.status_code == 200


@pytest.mark.parametrize("path", ["/api/predict/tiny-svc/v1/completions", "/v1/completions"])
def test_rejects_missing_token(deployed: Deployed, http: httpx.Client, path: str) -> None:
    response = http.post(deployed.gateway.url + path, json={"model": "tiny", "prompt": "x"})
    assert_error(response, 401, "invalid_request_error", "missing_api_key")
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("scheme", ["Bearer ", ""])
def test_rejects_wrong_token(deployed: Deployed, http: httpx.Client, scheme: str) -> None:
    other_token, _ = make_token()
    response = http.post(
        deployed.gateway.url + "/v1/completions",
        json={"model": "tiny", "prompt": "x"},
        headers={"Authorization": scheme + other_token},
    )
    assert_error(response, 401, "invalid_request_error", "invalid_api_key")


def test_openai_client_sees_wrong_token_as_authentication_error(deployed: Deployed) -> None:
    with (
        openai_client(deployed.gateway, "wsk-not-a-real-token") as client,
        pytest.raises(openai.AuthenticationError) as raised,
    ):
        client.completions.create(model="tiny", prompt="x")
    assert "not valid for any service" in str(raised.value)


def test_rejects_unknown_service_in_eas_form_before_checking_the_token(
    deployed: Deployed, http: httpx.Client
) -> None:
    eas = http.post(deployed.gateway.url + "/api/predict/nope/v1/completions", json={})
    assert_error(eas, 404, "invalid_request_error", "service_not_found")


def test_unknown_model_is_openais_model_not_found_after_the_token_is_checked(
    deployed: Deployed, http: httpx.Client
) -> None:
    body = {"model": "nope", "prompt": "x"}
    stranger = http.post(deployed.gateway.url + "/v1/completions", json=body)
    assert_error(stranger, 401, "invalid_request_error", "missing_api_key")
    response = http.post(
        deployed.gateway.url + "/v1/completions",
        json=body,
        headers={"Authorization": f"Bearer {deployed.token}"},
    )
    assert_error(response, 404, "invalid_request_error", "model_not_found", param="model")


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"prompt": "no model"}', b'["a", "list"]', b'{"model": 42}', b""],
    ids=["not-json", "no-model", "not-an-object", "model-not-a-string", "empty"],
)
def test_rejects_body_without_json_model_with_400(
    deployed: Deployed, http: httpx.Client, body: bytes
) -> None:
    response = http.post(
        deployed.gateway.url + "/v1/chat/completions",
        content=body,
        headers={"Authorization": f"Bearer {deployed.token}"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_service_without_ready_instance_is_503_after_auth(
    start_gateway: Callable[..., Gateway], http: httpx.Client
) -> None:
    token, digest = make_token()
    gateway = start_gateway(snapshot(1, service("cold", [], [digest])))
    response = http.post(
        gateway.url + "/v1/completions",
        json={"model": "cold", "prompt": "x"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert_error(response, 503, "server_error", "no_ready_instance")
    assert response.headers["retry-after"]
    unauthenticated = http.post(gateway.url + "/v1/completions", json={"model": "cold"})
    assert unauthenticated.status_code == 401


def test_lists_only_models_the_token_may_call(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    token, digest = make_token()
    _, other_digest = make_token()
    gateway = start_gateway(
        snapshot(
            1,
            service("named", [engines[0].instance], [digest], models=("m1", "m2")),
            service("bare", [], [digest, other_digest]),
            service("foreign", [engines[1].instance], [other_digest], models=("secret",)),
        )
    )
    with openai_client(gateway, token) as client:
        assert [m.id for m in client.models.list().data] == ["bare", "m1", "m2"]
    with openai_client(gateway, "wsk-unknown") as client, pytest.raises(openai.AuthenticationError):
        client.models.list()


def test_healthz_reports_snapshot_version_without_auth(
    deployed: Deployed, http: httpx.Client
) -> None:
    response = http.get(deployed.gateway.url + "/healthz")
    assert response.json() == {"status": "ok", "snapshot_version": 1}


def test_unknown_route_answers_in_openai_error_shape(
    deployed: Deployed, http: httpx.Client
) -> None:
    assert_error(
        http.get(deployed.gateway.url + "/v2/nothing"),
        404,
        "invalid_request_error",
        "route_not_found",
    )
    assert http.get(deployed.gateway.url + "/v1/completions").status_code == 405
