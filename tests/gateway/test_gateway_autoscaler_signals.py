"""What the gateway tells the autoscaler in its in-flight report (contracts.inflight):
requests/s per service over the last QPS_WINDOW seconds, and requests held for services
scaled to zero, written at once when one is held."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest
import redis
import redis.asyncio as aioredis
from gateway_support import (
    Engine,
    Gateways,
    RedisProcess,
    make_token,
    service,
    snapshot,
    unique,
    wait_until,
)

from contracts.inflight import QPS_WINDOW, read_reports
from gateway.health import RedisHealth
from gateway.observe.inflight import InflightReporter
from gateway.observe.request_rates import RequestRates
from gateway.routing.balancer import Balancer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def private_url(redis_process: RedisProcess) -> Iterator[str]:
    """A Redis of the test's own: the only report in it is its gateway's."""
    redis_process.start()
    yield redis_process.url


def test_report_carries_each_services_requests_per_second(
    private_url: str, engines: list[Engine]
) -> None:
    token, digest = make_token()
    busy = service(unique("busy"), [engines[0].instance], [digest], models=(unique("m"),))
    quiet = service(unique("quiet"), [engines[1].instance], [digest])
    gateways = Gateways(private_url)
    gateway = gateways.start(snapshot(1, busy, quiet))
    try:
        headers = {"Authorization": f"Bearer {token}"}
        body = {"model": busy.served_model_names[0], "prompt": "x", "max_tokens": 1}
        with httpx.Client(timeout=10, trust_env=False) as client:
            for _ in range(15):
                response = client.post(gateway.url + "/v1/completions", json=body, headers=headers)
                assert response.status_code == 200
            # Whatever their outcome, authorized requests are demand: 400s count too ...
            for _ in range(5):
                response = client.post(
                    f"{gateway.url}/api/predict/{busy.name}/v1/completions",
                    content=b"not json", headers=headers,
                )  # fmt: skip
                assert response.status_code == 400
            # ... and a stranger's do not.
            client.post(gateway.url + "/v1/completions", json=body, headers={"Authorization": "x"})

        def qps() -> dict[str, float]:
            with redis.Redis.from_url(private_url) as client:
                reports = read_reports(client)
            return reports[0].get("qps", {}) if reports else {}

        assert wait_until(lambda: qps() == {busy.name: 20 / QPS_WINDOW}, 3), qps()
    finally:
        gateways.stop_all()


def test_request_rates_slide_over_the_window() -> None:
    now = [1000.0]
    rates = RequestRates(window=10, clock=lambda: now[0])
    for _ in range(30):
        rates.count("a")
    rates.count("b")
    assert rates.rates() == {"a": 3.0, "b": 0.1}
    now[0] += 5
    rates.count("a")
    assert rates.rates() == {"a": 3.1, "b": 0.1}
    now[0] += 5  # the first second left the window
    assert rates.rates() == {"a": 0.1}
    now[0] += 10
    assert rates.rates() == {}


def test_a_held_request_is_reported_before_the_next_tick(redis_url: str) -> None:
    prefix = f"wharf:test:{unique('inflight')}:"

    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        held: dict[str, int] = {}
        reporter = InflightReporter(
            client, Balancer(), RedisHealth(client, str), prefix=prefix, interval=30
        )
        reporter.held_by(lambda: dict(held))
        reporter.start()
        try:
            for _ in range(100):  # the first report, written at start
                if await client.get(reporter.key):
                    break
                await asyncio.sleep(0.02)
            held["idle-svc"] = 1
            reporter.nudge()
            for _ in range(50):
                raw = await client.get(reporter.key)
                if raw and json.loads(raw).get("held") == {"idle-svc": 1}:
                    return
                await asyncio.sleep(0.02)
            raise AssertionError("the held request was not reported within 1 s")
        finally:
            await reporter.stop()
            await client.aclose()

    asyncio.run(scenario())
