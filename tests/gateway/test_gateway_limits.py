"""Each limit refusing with OpenAI's 429 and headers, then admitting again once it allows.

Windows are shortened through the gateway's settings (a "second" or "minute" of a couple of
seconds), so recovering takes the test seconds, not minutes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from gateway_support import (
    Engine,
    Gateway,
    assert_error,
    make_key,
    make_token,
    metric,
    openai_client,
    service,
    snapshot,
    unique,
    wait_until,
)

from contracts.routing import RoutedKey

pytestmark = pytest.mark.timeout(30)


def post(http: httpx.Client, gateway: Gateway, token: str, body: dict[str, Any]) -> httpx.Response:
    return http.post(
        gateway.url + "/v1/completions",
        content=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )


def estimate(body: dict[str, Any]) -> int:
    """The gateway's admission estimate: a quarter of the body's bytes, plus max_tokens."""
    return len(json.dumps(body).encode()) // 4 + body["max_tokens"]


def wait_out(response: httpx.Response) -> None:
    """Sleep as long as the 429 says, as a well-behaved client would."""
    time.sleep(int(response.headers["retry-after-ms"]) / 1000)


def assert_rate_limited(response: httpx.Response, error_type: str, words: str) -> None:
    assert_error(response, 429, error_type, "rate_limit_exceeded")
    assert words in response.json()["error"]["message"]
    # Whole seconds for everyone, milliseconds for the OpenAI SDKs; both within their 120 s.
    assert 1 <= int(response.headers["retry-after"]) <= 120
    assert 0 < int(response.headers["retry-after-ms"]) <= 120_000


class HeldStream:
    """A stream kept open, and so in flight, until read to its end or closed."""

    def __init__(self, http: httpx.Client, gateway: Gateway, token: str, model: str) -> None:
        body = {"model": model, "prompt": "x", "stream": True, "max_tokens": 20}
        self._context = http.stream(
            "POST",
            gateway.url + "/v1/completions",
            json={**body, "chunk_delay": 0.03},
            headers={"Authorization": f"Bearer {token}"},
        )
        self.response = self._context.__enter__()
        assert self.response.status_code == 200
        # Kept referenced: a discarded, half-read iterator closes the connection.
        self._chunks = self.response.iter_raw()
        next(self._chunks)  # the engine is generating

    def finish(self) -> None:
        for _ in self._chunks:
            pass

    def close(self) -> None:
        self._context.__exit__(None, None, None)


@pytest.fixture
def held_stream(http: httpx.Client) -> Iterator[Callable[..., HeldStream]]:
    """Opens streams that stay open until the test ends or closes them."""
    opened: list[HeldStream] = []

    def open_stream(gateway: Gateway, token: str, model: str) -> HeldStream:
        opened.append(HeldStream(http, gateway, token, model))
        return opened[-1]

    yield open_stream
    for stream in opened:
        stream.close()


def test_service_requests_per_second_refused_beyond_the_limit_then_recovered(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    svc = service(unique("svc"), [engines[0].instance], [digest], rate_limit=2)
    gateway = start_gateway(snapshot(1, svc), second_s=2.0)
    body = {"model": svc.name, "prompt": "x", "max_tokens": 1}

    assert [post(http, gateway, token, body).status_code for _ in range(2)] == [200, 200]
    refused = post(http, gateway, token, body)
    assert_rate_limited(refused, "requests", "rate limit of 2 requests per second reached")
    assert int(refused.headers["retry-after-ms"]) <= 2000

    wait_out(refused)
    assert post(http, gateway, token, body).status_code == 200
    text = gateway.metrics()
    assert metric(text, "wharf_gateway_rejections_total", service=svc.name, reason="service_rps")
    assert (
        metric(text, "wharf_gateway_requests_total", service=svc.name, status="429", adapter="")
        == 1
    )


def test_key_requests_per_minute_counted_in_headers_refused_then_recovered(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_key()
    key = RoutedKey(unique("k"), rpm=3)
    svc = service(unique("svc"), [engines[0].instance], [], models=("m",))
    gateway = start_gateway(snapshot(1, svc, keys={digest: key}), minute_s=2.0)
    body = {"model": "m", "prompt": "x", "max_tokens": 1}

    for remaining in (2, 1, 0):
        admitted = post(http, gateway, token, body)
        assert admitted.status_code == 200
        assert admitted.headers["x-ratelimit-limit-requests"] == "3"
        assert admitted.headers["x-ratelimit-remaining-requests"] == str(remaining)
        assert admitted.headers["x-ratelimit-reset-requests"].endswith("s")
    refused = post(http, gateway, token, body)
    assert_rate_limited(refused, "requests", "requests per minute limit of 3 reached")
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert key.id in refused.json()["error"]["message"]

    wait_out(refused)
    assert post(http, gateway, token, body).status_code == 200


def test_key_tokens_per_minute_admit_on_estimates_corrected_by_real_usage(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    # The engine stops after 2 tokens of the 60 asked: the estimate is far above the use.
    short = {"model": "m", "prompt": "x", "max_tokens": 60, "stop_after": 2}
    guess = estimate(short)
    tpm = 2 * guess - 1  # two uncorrected estimates would not fit
    token, digest = make_key()
    svc = service(unique("svc"), [engines[0].instance], [], models=("m",))
    gateway = start_gateway(
        snapshot(1, svc, keys={digest: RoutedKey(unique("k"), tpm=tpm)}), minute_s=2.0
    )

    first = post(http, gateway, token, short)
    assert first.status_code == 200
    assert first.headers["x-ratelimit-limit-tokens"] == str(tpm)
    assert first.headers["x-ratelimit-remaining-tokens"] == str(tpm - guess)
    # Admitted only because the first one's estimate was replaced by its 3 real tokens.
    second = post(http, gateway, token, short)
    assert second.status_code == 200
    assert second.headers["x-ratelimit-remaining-tokens"] == str(tpm - 3 - guess)
    # This one uses nearly all it asks for, which leaves no room for another estimate.
    full = {"model": "m", "prompt": "x", "max_tokens": guess - 6}
    assert post(http, gateway, token, full).status_code == 200

    refused = post(http, gateway, token, short)
    assert_rate_limited(refused, "tokens", f"tokens per minute limit of {tpm} reached")
    assert refused.headers["x-ratelimit-limit-tokens"] == str(tpm)
    left = int(refused.headers["x-ratelimit-remaining-tokens"])
    assert left == tpm - 3 - 3 - (1 + guess - 6)
    wait_out(refused)
    assert post(http, gateway, token, short).status_code == 200


def test_request_larger_than_the_whole_token_budget_is_refused_without_retry(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_key()
    svc = service(unique("svc"), [engines[0].instance], [], models=("m",))
    gateway = start_gateway(snapshot(1, svc, keys={digest: RoutedKey(unique("k"), tpm=50)}))
    refused = post(http, gateway, token, {"model": "m", "prompt": "x", "max_tokens": 100})
    assert_error(refused, 429, "tokens", "rate_limit_exceeded")
    assert "Request too large" in refused.json()["error"]["message"]
    assert refused.headers["x-should-retry"] == "false"
    assert "retry-after" not in refused.headers


def test_key_concurrency_refuses_while_full_and_frees_the_slot_when_requests_end(
    start_gateway: Callable[..., Gateway],
    engines: list[Engine],
    http: httpx.Client,
    held_stream: Callable[..., HeldStream],
) -> None:
    token, digest = make_key()
    key = RoutedKey(unique("k"), max_concurrency=1)
    svc = service(unique("svc"), [engines[0].instance], [], models=("m",))
    gateway = start_gateway(snapshot(1, svc, keys={digest: key}))
    body = {"model": "m", "prompt": "x", "max_tokens": 1}

    stream = held_stream(gateway, token, "m")
    refused = post(http, gateway, token, body)
    assert_rate_limited(refused, "requests", "concurrent requests limit of 1 reached")
    stream.finish()  # the request is over
    assert post(http, gateway, token, body).status_code == 200

    # A client that leaves mid-stream frees its slot too.
    held_stream(gateway, token, "m").close()
    assert wait_until(lambda: post(http, gateway, token, body).status_code == 200)


def test_instance_queue_refuses_beyond_max_queue_size_then_recovers(
    start_gateway: Callable[..., Gateway],
    engines: list[Engine],
    http: httpx.Client,
    held_stream: Callable[..., HeldStream],
) -> None:
    token, digest = make_token()
    svc = service(unique("svc"), [engines[0].instance], [digest], max_queue_size=1)
    gateway = start_gateway(snapshot(1, svc))
    body = {"model": svc.name, "prompt": "x", "max_tokens": 1}

    stream = held_stream(gateway, token, svc.name)
    refused = post(http, gateway, token, body)
    assert_rate_limited(refused, "requests", "queue limit of 1 outstanding requests")
    stream.finish()
    assert post(http, gateway, token, body).status_code == 200


def test_full_instance_is_passed_over_for_one_with_room(
    start_gateway: Callable[..., Gateway],
    engines: list[Engine],
    http: httpx.Client,
    held_stream: Callable[..., HeldStream],
) -> None:
    token, digest = make_token()
    instances = [e.instance for e in engines]
    svc = service(unique("svc"), instances, [digest], max_queue_size=1)
    gateway = start_gateway(snapshot(1, svc))

    first = held_stream(gateway, token, svc.name)
    second = held_stream(gateway, token, svc.name)
    served = {stream.response.headers["x-wharf-instance"] for stream in (first, second)}
    assert served == {"engine-a", "engine-b"}
    refused = post(http, gateway, token, {"model": svc.name, "prompt": "x", "max_tokens": 1})
    assert refused.status_code == 429


def test_openai_client_retries_a_429_and_succeeds_once_the_window_passes(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    token, digest = make_token()
    svc = service(unique("svc"), [engines[0].instance], [digest], rate_limit=1)
    gateway = start_gateway(snapshot(1, svc))
    with openai_client(gateway, token, max_retries=2) as client:
        client.completions.create(model=svc.name, prompt="x", max_tokens=1)
        started = time.monotonic()
        retried = client.completions.create(model=svc.name, prompt="x", max_tokens=1)
        waited = time.monotonic() - started
    assert retried.choices[0].text
    assert 0.3 < waited < 2.5  # the SDK slept as long as retry-after-ms said, then got in
    refusals = metric(
        gateway.metrics(), "wharf_gateway_rejections_total", service=svc.name, reason="service_rps"
    )
    assert refusals == 1


def test_answers_carry_no_rate_limit_headers_when_no_key_limit_applies(
    start_gateway: Callable[..., Gateway], engines: list[Engine], http: httpx.Client
) -> None:
    token, digest = make_token()
    svc = service(unique("svc"), [engines[0].instance], [digest], rate_limit=100)
    gateway = start_gateway(snapshot(1, svc))
    response = post(http, gateway, token, {"model": svc.name, "prompt": "x", "max_tokens": 1})
    assert response.status_code == 200
    assert not [name for name in response.headers if name.startswith("x-ratelimit")]


def test_concurrent_requests_within_limits_are_all_admitted(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    token, digest = make_key()
    key = RoutedKey(unique("k"), rpm=1000, tpm=1_000_000, max_concurrency=50)
    instances = [e.instance for e in engines]
    svc = service(unique("svc"), instances, [], models=("m",), rate_limit=1000, max_queue_size=50)
    gateway = start_gateway(snapshot(1, svc, keys={digest: key}))
    statuses: list[int] = []

    def call() -> None:
        with httpx.Client(timeout=10, trust_env=False) as client:
            body = {"model": "m", "prompt": "x", "stream": True, "max_tokens": 3}
            statuses.append(post(client, gateway, token, body).status_code)

    threads = [threading.Thread(target=call) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [200] * 20
