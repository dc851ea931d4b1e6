"""The gateway's in-flight report (gateway.observe.inflight, contracts.inflight): an instance that
left routing counts as drained only once no request of any gateway is still at it.

Each test has a Redis of its own, so the only reports in it are its own gateway's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import httpx
import pytest
import redis
from gateway_support import (
    Engine,
    Gateway,
    Gateways,
    RedisProcess,
    make_token,
    service,
    snapshot,
    unique,
    wait_until,
)

from contracts.inflight import INFLIGHT_PREFIX, REPORT_TTL, drained, read_reports
from contracts.routing import PdRouting, RoutedInstance
from gateway.observe.inflight import InflightReporter
from gateway.routing.balancer import Balancer

pytestmark = pytest.mark.timeout(60)


def now_ms() -> int:
    """A snapshot version as the control plane makes them."""
    return time.time_ns() // 1_000_000


class Private:
    """A Redis of the test's own, with the gateways started on it."""

    def __init__(self, redis_process: RedisProcess) -> None:
        self.redis_url = redis_process.url
        self.gateways = Gateways(redis_process.url)

    def reports(self) -> list[dict]:
        with redis.Redis.from_url(self.redis_url) as client:
            return read_reports(client)

    def keys(self) -> list[bytes]:
        with redis.Redis.from_url(self.redis_url) as client:
            return list(client.scan_iter(match=INFLIGHT_PREFIX + "*"))

    def report(self) -> dict | None:
        """The one gateway's report (None before its first)."""
        reports = self.reports()
        assert len(reports) <= 1, reports
        return reports[0] if reports else None

    def in_flight(self) -> dict | None:
        report = self.report()
        return None if report is None else report["in_flight"]


@pytest.fixture
def private(redis_process: RedisProcess) -> Iterator[Private]:
    redis_process.start()
    private = Private(redis_process)
    yield private
    private.gateways.stop_all()


def post(gateway: Gateway, token: str, path: str, body: dict[str, Any]) -> httpx.Response:
    """The whole answer, streamed or not, read to its end."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=30, trust_env=False) as client:
        response = client.post(gateway.url + path, json=body, headers=headers)
    return response


SLOW = {"max_tokens": 8, "chunk_delay": 0.4}  # a stream of about 3 s


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param("/v1/completions", {"stream": True, **SLOW}, id="openai-stream"),
        pytest.param("/v1/chat/completions", {"stream": True, **SLOW}, id="openai-chat-stream"),
        pytest.param("/api/predict/{svc}/v1/completions", {"stream": True, **SLOW}, id="eas"),
        pytest.param("/v1/completions", {"delay": 3.0, "max_tokens": 2}, id="openai-json"),
    ],
)
def test_instance_removed_mid_request_is_drained_once_the_answer_ends(
    private: Private, engines: list[Engine], path: str, body: dict[str, Any]
) -> None:
    token, digest = make_token()
    name = unique("svc")
    svc = service(name, [engines[0].instance], [digest], models=("m",))
    first = now_ms()
    gateway = private.gateways.start(snapshot(first, svc))
    assert wait_until(lambda: private.report() is not None, 3)
    report = private.report()
    assert report is not None and (report["snapshot"], report["in_flight"]) == (first, {})

    request = {"model": "m", "prompt": "x", "messages": [{"role": "user", "content": "x"}]}
    with ThreadPoolExecutor(1) as pool:
        answer: Future[httpx.Response] = pool.submit(
            post, gateway, token, path.format(svc=name), {**request, **body}
        )
        assert wait_until(lambda: private.in_flight() == {"engine-a": 1}, 3)

        # The control plane takes engine-a out of routing: engine-b serves new requests.
        removed_at = now_ms()
        gateway.publish(snapshot(removed_at, replace(svc, instances=(engines[1].instance,))))
        assert not drained(private.reports(), "engine-a", removed_at)
        assert wait_until(lambda: private.report()["snapshot"] == removed_at, 3)  # type: ignore[index]
        # Out of the snapshot, but the request still runs there: still counted.
        assert private.in_flight() == {"engine-a": 1}
        assert not drained(private.reports(), "engine-a", removed_at)
        assert drained(private.reports(), "engine-b", removed_at)
        assert not answer.done(), "the answer ended before the checks: make it slower"

        response = answer.result(30)
    assert response.status_code == 200, response.text
    assert response.headers["x-wharf-instance"] == "engine-a"
    if body.get("stream"):
        assert response.text.endswith("data: [DONE]\n\n")
    assert wait_until(lambda: private.in_flight() == {}, 3)
    assert drained(private.reports(), "engine-a", removed_at)


def test_both_prefill_and_decode_legs_are_counted(private: Private, engines: list[Engine]) -> None:
    token, digest = make_token()
    prefill = replace(engines[0].instance, role="prefill")
    decode = replace(engines[1].instance, role="decode")
    svc = replace(
        service(unique("pd"), [prefill, decode], [digest], models=("m",)),
        pd=PdRouting("ExampleConnector"),
    )
    gateway = private.gateways.start(snapshot(now_ms(), svc))
    assert wait_until(lambda: private.report() is not None, 3)
    # The engine waits `delay` before answering, on each leg; decode then streams.
    body = {"model": "m", "prompt": "x", "delay": 1.5, "stream": True, **SLOW}
    seen: list[dict] = []
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(post, gateway, token, "/v1/completions", body)
        while not answer.done():
            counts = private.in_flight()
            if counts is not None and (not seen or seen[-1] != counts):
                seen.append(counts)
            time.sleep(0.05)
        response = answer.result()
    assert response.status_code == 200 and response.headers["x-wharf-instance"] == "engine-b"
    # Prefill first (its one-token leg), then decode for the whole stream; never both at once.
    assert {"engine-a": 1} in seen and {"engine-b": 1} in seen, seen
    assert seen.index({"engine-a": 1}) < seen.index({"engine-b": 1}), seen
    assert all(len(counts) <= 1 for counts in seen), seen
    assert wait_until(lambda: private.in_flight() == {}, 3)


def test_report_expires_and_is_deleted_when_the_gateway_stops(
    private: Private, engines: list[Engine]
) -> None:
    svc = service(unique("svc"), [engines[0].instance], [make_token()[1]])
    private.gateways.start(snapshot(now_ms(), svc))
    assert wait_until(lambda: len(private.keys()) == 1, 3)
    with redis.Redis.from_url(private.redis_url) as client:
        ttl = client.ttl(private.keys()[0])
    assert 0 < ttl <= REPORT_TTL  # a gateway that dies leaves nothing behind for long

    started = time.monotonic()
    private.gateways.stop_all()
    assert private.keys() == []
    assert time.monotonic() - started < REPORT_TTL  # deleted, not left to expire
    assert drained(private.reports(), "engine-a", now_ms())


def test_reports_resume_after_a_redis_outage(
    private: Private, redis_process: RedisProcess, engines: list[Engine]
) -> None:
    token, digest = make_token()
    svc = service(unique("svc"), [engines[0].instance], [digest], models=("m",))
    version = now_ms()
    gateway = private.gateways.start(snapshot(version, svc))
    assert wait_until(lambda: private.report() is not None, 3)

    redis_process.stop()
    time.sleep(1.5)  # a few failed ticks
    redis_process.start()  # back empty: no persistence
    assert wait_until(lambda: private.report() is not None, 5)
    assert private.report()["snapshot"] == version  # type: ignore[index]
    answer = post(gateway, token, "/v1/completions", {"model": "m", "prompt": "x"})
    assert answer.status_code == 200


def _instances(*pairs: tuple[str, str]) -> list[RoutedInstance]:
    return [RoutedInstance(name=name, url=url) for name, url in pairs]


def test_reporter_names_instances_until_they_are_idle_and_gone() -> None:
    balancer = Balancer()
    reporter = InflightReporter(None, balancer, None, gateway_id="g")  # type: ignore[arg-type]
    a, b = "http://10.0.0.1:8000", "http://10.0.0.2:8000"
    both = service("s", _instances(("a", a), ("b", b)), [])
    reporter.seen(snapshot(10, both))
    assert reporter.key == "wharf:inflight:g"
    assert reporter.counts() == {}
    balancer.acquire(a)
    balancer.acquire(a)
    balancer.acquire(b)
    assert reporter.counts() == {"a": 2, "b": 1}

    reporter.seen(snapshot(20, service("s", _instances(("b", b)), [])))  # a removed
    assert reporter.counts() == {"a": 2, "b": 1}
    balancer.release(a)
    assert reporter.counts() == {"a": 1, "b": 1}
    balancer.release(a)
    balancer.release(b)
    assert reporter.counts() == {}
    balancer.acquire(b)
    assert reporter.counts() == {"b": 1}  # b is in the snapshot: known while idle too
    assert '"snapshot": 20' in reporter.report()
