"""The gateway's metrics name every service: GET /metrics answers the operator's scraper only,
with its token on the gateway's port or on a listener of the operator's choosing."""

from __future__ import annotations

import socket
from collections.abc import Callable

import httpx
import pytest
from gateway_support import (
    METRICS_AUTHORIZATION,
    METRICS_TOKEN,
    Engine,
    Gateway,
    assert_error,
    make_key,
    make_token,
    service,
    snapshot,
    unique,
    wait_until,
)

from contracts.routing import RoutedKey
from gateway.config import ConfigError, listen_address, load_settings

pytestmark = pytest.mark.timeout(30)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _deploy(start_gateway: Callable[..., Gateway], engines: list[Engine], **settings) -> tuple:
    token, digest = make_token()
    key, key_digest = make_key()
    svc = service(unique("secret-name"), [engines[0].instance], [digest])
    routing = snapshot(1, svc, keys={key_digest: RoutedKey(unique("k"))})
    return start_gateway(routing, **settings), svc, token, key


def test_without_a_token_the_metrics_answer_no_one(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    gateway, svc, token, _ = _deploy(start_gateway, engines, metrics_token="")
    for headers in ({}, {"Authorization": f"Bearer {token}"}, METRICS_AUTHORIZATION):
        answer = http.get(gateway.url + "/metrics", headers=headers)
        assert_error(answer, 403, "invalid_request_error", "metrics_closed")
        assert "WHARF_GATEWAY_METRICS_TOKEN" in answer.text and svc.name not in answer.text


def test_the_metrics_token_opens_them_and_no_callers_token_does(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    gateway, svc, token, key = _deploy(start_gateway, engines)
    assert http.post(f"{gateway.url}/api/predict/{svc.name}/v1/completions", json={},
                     headers={"Authorization": token}).status_code == 200  # fmt: skip
    missing = http.get(gateway.url + "/metrics")
    assert_error(missing, 401, "invalid_request_error", "missing_metrics_token")
    for wrong in (token, key, METRICS_TOKEN + "x", METRICS_TOKEN[:-1]):
        answer = http.get(gateway.url + "/metrics", headers={"Authorization": f"Bearer {wrong}"})
        assert_error(answer, 401, "invalid_request_error", "invalid_metrics_token")
        assert svc.name not in answer.text
    bare = http.get(gateway.url + "/metrics", headers={"Authorization": METRICS_TOKEN})
    assert_error(bare, 401, "invalid_request_error", "missing_metrics_token")
    scraped = http.get(gateway.url + "/metrics", headers=METRICS_AUTHORIZATION)
    assert scraped.status_code == 200 and f'service="{svc.name}"' in scraped.text


def test_a_listener_the_operator_names_serves_the_metrics_alone(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    port = _free_port()
    gateway, svc, token, _ = _deploy(
        start_gateway, engines, metrics_token="", metrics_listen=f"127.0.0.1:{port}"
    )
    http.post(f"{gateway.url}/api/predict/{svc.name}/v1/completions", json={},
              headers={"Authorization": token})  # fmt: skip
    listener = f"http://127.0.0.1:{port}"
    assert wait_until(lambda: _answers(listener), 5)
    scraped = http.get(listener + "/metrics")
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
    assert f'service="{svc.name}"' in scraped.text
    # Only the metrics there: no calls, no other route.
    assert_error(http.get(listener + "/healthz"), 404, "invalid_request_error", "route_not_found")
    assert_error(http.post(listener + "/metrics"), 405, "invalid_request_error",
                 "method_not_allowed")  # fmt: skip
    assert_error(http.post(f"{listener}/api/predict/{svc.name}/v1/completions", json={},
                           headers={"Authorization": token}),
                 404, "invalid_request_error", "route_not_found")  # fmt: skip
    # And the gateway's own port stays closed.
    assert_error(http.get(gateway.url + "/metrics"), 403, "invalid_request_error",
                 "metrics_closed")  # fmt: skip


def test_the_listener_drops_an_oversized_head(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    port = _free_port()
    _deploy(start_gateway, engines, metrics_listen=f"127.0.0.1:{port}")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as peer:
        # Closed, unanswered. The listener closes with the rest of the head unread, so the
        # kernel may end the connection with a reset rather than an orderly close.
        try:
            peer.sendall(b"GET /metrics HTTP/1.1\r\nx-pad: " + b"x" * 64 * 1024)
            answer = peer.recv(1024)
        except (ConnectionResetError, BrokenPipeError):
            answer = b""
        assert answer == b""


def _answers(url: str) -> bool:
    try:
        return httpx.get(url + "/metrics", trust_env=False).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.parametrize(
    ("value", "address"),
    [
        ("127.0.0.1:9091", ("127.0.0.1", 9091)),
        ("0.0.0.0:9091", ("0.0.0.0", 9091)),
        ("[::1]:9091", ("::1", 9091)),
        ("metrics.internal:80", ("metrics.internal", 80)),
        ("9091", None),
        (":9091", None),
        ("127.0.0.1:0", None),
        ("127.0.0.1:65536", None),
        ("127.0.0.1:port", None),
    ],
)
def test_a_metrics_address_is_host_and_port(value: str, address: tuple | None) -> None:
    assert listen_address(value) == address


def test_settings_read_the_metrics_token_from_a_file_and_refuse_a_bad_address(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setenv("WHARF_TOKEN_KEY", "secret")
    monkeypatch.delenv("WHARF_GATEWAY_METRICS_TOKEN", raising=False)
    monkeypatch.delenv("WHARF_GATEWAY_METRICS_LISTEN", raising=False)
    (tmp_path / "metrics-token").write_text("scrape-me\n")
    monkeypatch.setenv("WHARF_GATEWAY_METRICS_TOKEN_FILE", str(tmp_path / "metrics-token"))
    settings = load_settings()
    assert (settings.metrics_token, settings.metrics_listen) == ("scrape-me", "")
    monkeypatch.setenv("WHARF_GATEWAY_METRICS_LISTEN", "9091")
    with pytest.raises(ConfigError, match="WHARF_GATEWAY_METRICS_LISTEN"):
        load_settings()


@pytest.mark.parametrize(
    ("variable", "field", "default"),
    [
        ("WHARF_GATEWAY_MAX_SSE_EVENT_BYTES", "max_sse_event_bytes", 1 << 20),
        ("WHARF_GATEWAY_JSON_TAP_BYTES", "json_tap_bytes", 1 << 20),
        ("WHARF_GATEWAY_MAX_PREFILL_ANSWER_BYTES", "max_prefill_answer_bytes", 4 << 20),
    ],
)
def test_the_answer_caps_are_settings(
    monkeypatch: pytest.MonkeyPatch, variable: str, field: str, default: int
) -> None:
    monkeypatch.setenv("WHARF_TOKEN_KEY", "secret")
    monkeypatch.delenv(variable, raising=False)
    assert getattr(load_settings(), field) == default
    monkeypatch.setenv(variable, "4096")
    assert getattr(load_settings(), field) == 4096
    monkeypatch.setenv(variable, "0")
    with pytest.raises(ConfigError, match=variable):
        load_settings()
