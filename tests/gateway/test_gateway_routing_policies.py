"""The routing policies through a running gateway (fake engines, real Redis): a service's
`routing` picks the policy, kv_cache_load reads the engines' scraped figures from Redis,
session follows the service's session header, prefix_cache keeps a shared prompt prefix on
one instance, and a prefill/decode service's prefill leg follows its prefill policy.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
import redis
from gateway_support import (
    Engine,
    Gateway,
    ServerThread,
    make_token,
    service,
    snapshot,
    unique,
    wait_until,
)
from upstream_app import Recorder, create_upstream

from contracts import engine_load
from contracts.routing import PdRouting, RoutedInstance, RoutedService

pytestmark = pytest.mark.timeout(60)


class Routed:
    """A gateway with one service over both engines, under names of this test's own (the
    engines' figures in Redis are keyed by instance name)."""

    def __init__(self, start: Callable[..., Gateway], engines: list[Engine], **fields: Any):
        self.token, digest = make_token()
        self.a = RoutedInstance(unique("a"), engines[0].url)
        self.b = RoutedInstance(unique("b"), engines[1].url)
        svc = service(unique("svc"), [self.a, self.b], [digest], models=(unique("m"),))
        self.service = replace(svc, **fields)
        self.gateway = start(snapshot(1, self.service))

    def instance(self, prompt: str = "x", headers: dict[str, str] | None = None) -> str:
        """The instance that answered one request."""
        body = {"model": self.service.served_model_names[0], "prompt": prompt, "max_tokens": 1}
        response = httpx.post(
            self.gateway.url + "/v1/completions", json=body, trust_env=False,
            headers={"Authorization": f"Bearer {self.token}", **(headers or {})},
        )  # fmt: skip
        assert response.status_code == 200, response.text
        return response.headers["x-wharf-instance"]

    def instances(self, count: int) -> set[str]:
        """The instances that answered `count` requests in a row."""
        return {self.instance() for _ in range(count)}


@pytest.fixture
def figures(redis_url: str) -> Iterator[Callable[[RoutedInstance, dict[str, float]], None]]:
    """Writes an instance's latest engine sample, as a node's scraper does."""
    client = redis.Redis.from_url(redis_url)
    written: list[str] = []

    def write(instance: RoutedInstance, sample: dict[str, float]) -> None:
        key = engine_load.latest_key(instance.name)
        client.set(key, engine_load.encode({"at": time.time(), **sample}), ex=engine_load.STALE)
        written.append(key)

    yield write
    if written:
        client.delete(*written)
    client.close()


def test_kv_cache_load_follows_the_engines_figures(
    start_gateway: Callable[..., Gateway],
    engines: list[Engine],
    figures: Callable[[RoutedInstance, dict[str, float]], None],
) -> None:
    routed = Routed(start_gateway, engines, routing="kv_cache_load")
    # Without figures: by requests in flight, ties in turn.
    assert {routed.instance() for _ in range(4)} == {routed.a.name, routed.b.name}
    figures(routed.a, {"waiting": 4, "running": 8, "kv_cache": 0.9})
    figures(routed.b, {"waiting": 0, "running": 2, "kv_cache": 0.2})
    # Read within a second or so (gateway.routing.engine_figures), then B takes every request.
    assert wait_until(lambda: routed.instances(4) == {routed.b.name}, 5)
    assert routed.instances(6) == {routed.b.name}
    figures(routed.b, {"waiting": 6, "running": 8, "kv_cache": 0.95})
    figures(routed.a, {"waiting": 0, "running": 1, "kv_cache": 0.1})
    assert wait_until(lambda: routed.instances(4) == {routed.a.name}, 5)
    assert routed.instances(6) == {routed.a.name}


def test_session_routing_keeps_a_session_on_one_instance(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    routed = Routed(start_gateway, engines, routing="session", session_header="x-conversation")
    for session in ("s-1", "s-2", "s-3"):
        seen = {routed.instance(headers={"x-conversation": session}) for _ in range(4)}
        assert len(seen) == 1, (session, seen)
    spread = Counter(routed.instance(headers={"x-conversation": f"u-{n}"}) for n in range(20))
    assert set(spread) == {routed.a.name, routed.b.name}
    # Another header is no session: requests rotate.
    assert {routed.instance(headers={"x-session-id": "s-1"}) for _ in range(4)} == set(spread)


def test_prefix_cache_keeps_a_shared_prefix_on_one_instance(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    routed = Routed(start_gateway, engines, routing="prefix_cache")
    system = "You are a terse assistant who answers in one word. " * 8
    seen = {routed.instance(system + f"Question {n}?") for n in range(8)}
    assert len(seen) == 1
    other = "Translate the following text into French, keeping its tone. " * 8
    other_seen = {routed.instance(other + f"Text {n}.") for n in range(8)}
    assert len(other_seen) == 1
    # Short prompts (under one block) have no prefix to keep: they rotate.
    assert {routed.instance(f"hi {n}") for n in range(4)} == {routed.a.name, routed.b.name}


def test_prefill_leg_follows_the_prefill_policy(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    token, digest = make_token()
    prefills = [RoutedInstance(unique("p"), e.url, role="prefill") for e in engines]
    recorder = Recorder()
    decoder = ServerThread(create_upstream("decoder", recorder)).start()
    try:
        decode = RoutedInstance(unique("d"), decoder.url, role="decode")
        pd = PdRouting("ExampleConnector", prefill_policy="prefix_cache")
        svc: RoutedService = replace(
            service(unique("pd"), [*prefills, decode], [digest], models=(unique("m"),)), pd=pd
        )
        gateway = start_gateway(snapshot(1, svc))
        system = "Summarize the document below in three bullet points. " * 8
        for n in range(6):
            body = {"model": svc.served_model_names[0], "prompt": system + str(n)}
            response = httpx.post(
                gateway.url + "/v1/completions", json=body, trust_env=False,
                headers={"Authorization": f"Bearer {token}", "x-test-id": f"{svc.name}-{n}"},
            )  # fmt: skip
            assert response.status_code == 200, response.text
            assert response.headers["x-wharf-instance"] == decode.name
    finally:
        decoder.stop()
    prefill_legs = Counter(
        engine.name
        for engine in engines
        for n in range(6)
        if f"{svc.name}-{n}" in engine.recorder.seen
    )
    assert len(prefill_legs) == 1 and sum(prefill_legs.values()) == 6, prefill_legs


def test_an_adapter_goes_to_the_engine_that_has_it_in_a_slot(
    start_gateway: Callable[..., Gateway],
    engines: list[Engine],
    figures: Callable[[RoutedInstance, dict[str, float]], None],
    redis_url: str,
) -> None:
    routed = Routed(start_gateway, engines, adapters=("sql", "chat"))
    client = redis.Redis.from_url(redis_url)

    def resident(instance: RoutedInstance, *adapters: str) -> None:
        figures(instance, {"running": 1})  # as a node's scraper writes them, side by side
        used = engine_load.encode_adapters(frozenset(adapters))
        client.set(engine_load.adapters_key(instance.name), used, ex=engine_load.STALE)

    def answered(model: str, count: int) -> set[str]:
        body = {"model": model, "prompt": "x", "max_tokens": 1}
        headers = {"Authorization": f"Bearer {routed.token}"}
        found = set()
        for _ in range(count):
            response = httpx.post(routed.gateway.url + "/v1/completions", json=body,
                                  headers=headers, trust_env=False)  # fmt: skip
            assert response.status_code == 200, response.text
            found.add(response.headers["x-wharf-instance"])
        return found

    base = routed.service.served_model_names[0]
    try:
        resident(routed.a, "chat")
        resident(routed.b, "sql")
        assert wait_until(lambda: answered(f"{base}:sql", 4) == {routed.b.name}, 5)
        assert answered(f"{base}:chat", 6) == {routed.a.name}
        assert answered(base, 6) == {routed.a.name, routed.b.name}  # the base: in turn
    finally:
        client.delete(*(engine_load.adapters_key(i.name) for i in (routed.a, routed.b)))
        client.close()
