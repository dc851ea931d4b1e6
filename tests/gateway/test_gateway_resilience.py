"""Without Redis the gateway keeps serving: limits count per process, usage waits in memory."""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx
import pytest
from gateway_support import (
    Engine,
    Gateway,
    RedisProcess,
    make_key,
    metric,
    service,
    snapshot,
    unique,
    wait_until,
)

from contracts.routing import RoutedKey

pytestmark = pytest.mark.timeout(30)


def test_redis_outage_falls_back_to_per_process_limits_and_keeps_usage(
    start_gateway: Callable[..., Gateway],
    engines: list[Engine],
    http: httpx.Client,
    redis_process: RedisProcess,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    redis_process.start()
    token, digest = make_key()
    key_id = unique("k")
    svc = service(unique("svc"), [engines[0].instance], [], models=("m",))
    routing = snapshot(1, svc, keys={digest: RoutedKey(key_id, rpm=2)})
    gateway = start_gateway(routing, redis_url=redis_process.url, poll=0.1)
    headers = {"Authorization": f"Bearer {token}"}

    def status() -> int:
        body = {"model": "m", "prompt": "x", "max_tokens": 1}
        return http.post(gateway.url + "/v1/completions", json=body, headers=headers).status_code

    assert status() == 200
    assert wait_until(lambda: gateway.usage().get((svc.name, key_id, "requests")) == 1)

    redis_process.stop()
    # The shared count (1 of 2) is out of reach: this process counts afresh, on its own.
    assert [status(), status(), status()] == [200, 200, 429]
    text = gateway.metrics()
    assert metric(text, "wharf_gateway_redis_up") == 0
    outage = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(outage) == 1, "the outage should be reported once, not once per request"
    assert "limits count per process" in outage[0].getMessage()

    # Back, empty (no persistence): what was counted meanwhile arrives, nothing is lost.
    redis_process.start()
    assert wait_until(lambda: metric(gateway.metrics(), "wharf_gateway_redis_up") == 1, 3)
    assert wait_until(lambda: gateway.usage().get((svc.name, key_id, "requests")) == 2, 3)
    assert "Redis reachable again" in caplog.text


@pytest.mark.parametrize(("mode", "limited"), [("open", [200, 200, 200]),
                                               ("closed", [503, 503, 503])])  # fmt: skip
def test_the_operator_chooses_open_or_closed_limits_while_redis_is_down(
    start_gateway: Callable[..., Gateway],
    engines: list[Engine],
    http: httpx.Client,
    redis_process: RedisProcess,
    mode: str,
    limited: list[int],
) -> None:
    """WHARF_LIMITS_ON_REDIS_DOWN: a key with rpm 1 is admitted uncounted (open) or refused
    with a 503 saying why (closed); a service token, under no limit, is served either way;
    Redis back, the limits hold again."""
    redis_process.start()
    token, digest = make_key()
    plain, plain_digest = make_key()
    svc = service(unique("svc"), [engines[0].instance], [plain_digest], models=("m",))
    routing = snapshot(1, svc, keys={digest: RoutedKey(unique("k"), rpm=1)})
    gateway = start_gateway(routing, redis_url=redis_process.url, poll=0.1,
                            limits_on_redis_down=mode)  # fmt: skip

    def status(who: str) -> httpx.Response:
        body = {"model": "m", "prompt": "x", "max_tokens": 1}
        return http.post(gateway.url + "/v1/completions", json=body,
                         headers={"Authorization": f"Bearer {who}"})  # fmt: skip

    assert status(token).status_code == 200
    redis_process.stop()
    answers = [status(token) for _ in range(3)]
    assert [a.status_code for a in answers] == limited
    if mode == "closed":
        error = answers[0].json()["error"]
        assert "WHARF_LIMITS_ON_REDIS_DOWN=closed" in error["message"]
        assert answers[0].headers["retry-after"] == "5"
    assert status(plain).status_code == 200  # no limit applies: served either way
    redis_process.start()
    assert wait_until(lambda: metric(gateway.metrics(), "wharf_gateway_redis_up") == 1, 3)
    assert wait_until(lambda: status(token).status_code == 429, 5)  # rpm 1, counted again
