"""The OpenAI form as OpenAI's clients expect it: the caller known before its body is read,
OpenAI's error types and codes, GET /v1/models/{id}, /v1/embeddings; and /readyz."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
import openai
import pytest
from gateway_support import (
    Deployed,
    Engine,
    Gateway,
    ServerThread,
    assert_error,
    make_key,
    make_token,
    openai_client,
    service,
    snapshot,
    unique,
    wait_until,
)
from starlette.applications import Starlette

from contracts.routing import RoutedInstance, RoutedKey

pytestmark = pytest.mark.timeout(60)


def raw_head_only(url: str, path: str, headers: dict[str, str], length: int) -> bytes:
    """Send a request's head announcing a `length`-byte body, none of it; the answer's bytes
    (until the gateway closes, or 3 s)."""
    where = urlsplit(url)
    lines = [f"POST {path} HTTP/1.1", f"host: {where.netloc}", f"content-length: {length}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    with socket.create_connection((where.hostname, where.port), timeout=3) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and answer.endswith(b"}"):
                    break
        except TimeoutError:
            pass
    return answer


@pytest.mark.parametrize(
    ("path", "authorization"),
    [
        ("/v1/completions", None),
        ("/v1/completions", "Bearer wsk-not-a-token"),
        ("/v1/embeddings", "Bearer wsk-not-a-token"),
        ("/api/predict/tiny-svc/v1/completions", None),
        ("/api/predict/tiny-svc/v1/completions", "wsk-not-a-token"),
    ],
)
def test_a_stranger_is_refused_before_its_body_is_read(
    deployed: Deployed, path: str, authorization: str | None
) -> None:
    # 8 MB announced (under the 16 MiB cap), none sent: a gateway reading the body first
    # would wait for it until the client gave up.
    headers = {"content-type": "application/json"}
    if authorization:
        headers["authorization"] = authorization
    started = time.monotonic()
    answer = raw_head_only(deployed.gateway.url, path, headers, 8 * 1024 * 1024)
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
    assert time.monotonic() - started < 2


def test_a_known_caller_over_the_size_cap_is_413_in_either_form(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    name = unique("svc")
    gateway = start_gateway(
        snapshot(1, service(name, [engines[0].instance], [digest])), max_body_bytes=1024
    )
    big = {"model": name, "prompt": "x" * 2000}
    headers = {"Authorization": f"Bearer {token}"}
    for path in (
        "/v1/completions",
        f"/api/predict/{name}/v1/completions",
        f"/api/predict/{name}/echo/x",
    ):
        answer = http.post(gateway.url + path, json=big, headers=headers)
        assert_error(answer, 413, "invalid_request_error", "body_too_large")
    assert gateway.in_flight(engines[0].url) == 0


def test_openai_sdk_sees_its_own_error_classes(deployed: Deployed) -> None:
    with openai_client(deployed.gateway, "wsk-unknown") as client:
        with pytest.raises(openai.AuthenticationError) as raised:
            client.completions.create(model="tiny", prompt="x")
        assert raised.value.code == "invalid_api_key"
        assert raised.value.type == "invalid_request_error"
    with openai_client(deployed.gateway, deployed.token) as client:
        with pytest.raises(openai.NotFoundError) as missing:
            client.completions.create(model="no-such-model", prompt="x")
        assert (missing.value.code, missing.value.param) == ("model_not_found", "model")


def test_get_model_answers_openais_model_object_for_a_model_the_caller_may_call(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    key_token, key_digest = make_key()
    mine = service(unique("mine"), [engines[0].instance], [digest], models=("org/m-1", "m2"))
    foreign = service(unique("foreign"), [engines[1].instance], [], models=("secret",))
    key = RoutedKey(unique("k"), services=frozenset({foreign.name}))
    gateway = start_gateway(snapshot(1, mine, foreign, keys={key_digest: key}))

    with openai_client(gateway, token) as client:
        model = client.models.retrieve("org/m-1")  # a slash in a model id, as in HF names
        assert (model.id, model.object, model.owned_by) == ("org/m-1", "model", "wharf")
        for hidden in ("secret", "nothing-at-all"):
            with pytest.raises(openai.NotFoundError):
                client.models.retrieve(hidden)
    answer = http.get(gateway.url + "/v1/models/secret", headers={"Authorization": token})
    assert_error(answer, 404, "invalid_request_error", "model_not_found", param="model")
    keyed = http.get(gateway.url + "/v1/models/secret", headers={"Authorization": key_token})
    assert keyed.json()["id"] == "secret"
    stranger = http.get(gateway.url + "/v1/models/m2")
    assert_error(stranger, 401, "invalid_request_error", "missing_api_key")


def test_embeddings_reach_an_engine_that_serves_them_and_count_usage(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    token, digest = make_token()
    name = unique("embed")
    gateway = start_gateway(snapshot(1, service(name, [engines[0].instance], [digest], ("e5",))))
    with openai_client(gateway, token) as client:
        result = client.embeddings.create(model="e5", input=["one two", "three"])
    assert [item.embedding[:2] for item in result.data] == [[0.25, -0.5], [0.25, -0.5]]
    assert result.usage.prompt_tokens == 3
    assert wait_until(lambda: gateway.usage().get((name, "-", "prompt")) == 3)


def test_embeddings_on_an_engine_without_the_route_are_an_openai_404_naming_the_model(
    start_gateway: Callable[..., Gateway], http: httpx.Client
) -> None:
    token, digest = make_token()
    name = unique("chat-only")
    bare = ServerThread(Starlette()).start()  # a server with no routes: a plain "Not Found"
    try:
        instance = RoutedInstance(name="bare", url=bare.url)
        gateway = start_gateway(snapshot(1, service(name, [instance], [digest])))
        answer = http.post(
            gateway.url + "/v1/embeddings",
            json={"model": name, "input": "x"},
            headers={"Authorization": token},
        )
        assert_error(answer, 404, "invalid_request_error", "model_not_supported", param="model")
        assert "/v1/embeddings" in answer.json()["error"]["message"]
        assert gateway.in_flight(bare.url) == 0
    finally:
        bare.stop()


def test_readyz_is_503_until_a_routing_snapshot_is_read(
    start_gateway: Callable[..., Gateway], http: httpx.Client
) -> None:
    gateway = start_gateway()  # nothing published yet
    answer = http.get(gateway.url + "/readyz")
    assert_error(answer, 503, "server_error", "routing_unavailable")
    assert http.get(gateway.url + "/healthz").status_code == 200  # alive all the same
    gateway.publish(snapshot(3))
    assert wait_until(lambda: http.get(gateway.url + "/readyz").status_code == 200)
    assert http.get(gateway.url + "/readyz").json() == {"status": "ready", "snapshot_version": 3}
