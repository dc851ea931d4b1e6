"""Mirroring (EAS's ServiceMirror) on a real gateway process: exactly ratio % of a service's
calls are copied to the target with its model name, the copies' answers are discarded, a slow
or failing target neither slows nor fails nor changes the caller's answers, and the copies'
figures and tokens are the target's own (contracts.call_figures, gateway.routing.mirror)."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest
from gateway_support import (
    Engine,
    GatewayProcess,
    RawEngineThread,
    call_figures,
    make_token,
    metric,
    read_usage,
    serve,
    service,
    snapshot,
    wait_until,
)
from raw_engine import read_request

from contracts.call_figures import MIRROR, Figures
from contracts.routing import RoutedInstance
from contracts.usage import MIRROR_KEY_ID

pytestmark = pytest.mark.timeout(120)

TOKEN, DIGEST = make_token()


@pytest.fixture(scope="module")
def gateway(figures_gateway: GatewayProcess) -> GatewayProcess:
    return figures_gateway


def figures(redis_url: str, gateway: GatewayProcess, name: str, track: str) -> Figures:
    return call_figures(redis_url, gateway, name, track)


def complete(client: httpx.Client, gateway: GatewayProcess, test_id: str, stream: bool = False):
    return client.post(
        gateway.url + "/v1/completions",
        json={"model": "main-model", "prompt": "hello there", "max_tokens": 3, "stream": stream},
        headers={"Authorization": f"Bearer {TOKEN}", "x-test-id": test_id},
    )


def test_exactly_the_ratio_is_copied_with_the_targets_model_and_its_own_usage(
    redis_url: str, gateway: GatewayProcess, engines: list[Engine]
):
    main_engine, shadow_engine = engines
    main = service("main", [main_engine.instance], [DIGEST], ("main-model",),
                   mirror_targets=("shadow",), mirror_ratio=25)  # fmt: skip
    shadow = service("shadow", [shadow_engine.instance], [], ("shadow-model",))
    serve(redis_url, gateway, snapshot(1, main, shadow))
    run = uuid.uuid4().hex[:8]
    with httpx.Client(timeout=10, trust_env=False) as client:
        for index in range(40):
            # every 4th call is copied (the 4th, 8th, ...): half of those streamed
            answer = complete(client, gateway, f"{run}-{index}", stream=index % 8 == 3)
            assert answer.status_code == 200 and "main" in answer.text  # the caller's own
    copied = lambda: [k for k in shadow_engine.recorder.seen if k.startswith(run)]  # noqa: E731
    assert wait_until(lambda: len(copied()) == 10, 5)  # 25 % of 40, exactly
    assert {shadow_engine.recorder.seen[k].body["model"] for k in copied()} == {"shadow-model"}

    def mirrored_usage() -> dict:
        usage = read_usage(redis_url, gateway.settings.usage_prefix)
        return {kind: n for (model, key, kind), n in usage.items()
                if model == "shadow" and key == MIRROR_KEY_ID}  # fmt: skip

    assert wait_until(lambda: mirrored_usage().get("requests") == 10, 5)
    assert mirrored_usage()["completion"] == 30  # its tokens: the mirror's, 3 per copy
    assert wait_until(lambda: figures(redis_url, gateway, "shadow", MIRROR).requests == 10, 5)
    mirrored = figures(redis_url, gateway, "shadow", MIRROR)
    assert mirrored.errors == 0 and sum(mirrored.ttft) == 10 and sum(mirrored.itl) == 5
    own = figures(redis_url, gateway, "main", "")
    assert own.requests >= 40 and sum(own.itl) >= 5  # streamed calls have inter-token gaps


def slow_failure(seconds: float):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(seconds)
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()

    return handler


def test_a_slow_failing_target_neither_slows_nor_fails_the_caller(
    redis_url: str, gateway: GatewayProcess, engines: list[Engine]
):
    with RawEngineThread(slow_failure(1.5)) as raw:
        main = service("main", [engines[0].instance], [DIGEST], ("main-model",),
                       mirror_targets=("shadow", "gone"), mirror_ratio=100)  # fmt: skip
        shadow = service("shadow", [RoutedInstance("raw", raw.url)], [], ("shadow-model",))
        serve(redis_url, gateway, snapshot(2, main, shadow))
        before = figures(redis_url, gateway, "shadow", MIRROR)
        with httpx.Client(timeout=10, trust_env=False) as client:
            started = time.monotonic()
            for index in range(10):
                answer = complete(client, gateway, f"slow-{index}")
                assert answer.status_code == 200
                assert answer.json()["choices"][0]["text"].startswith("engine-a")
            assert time.monotonic() - started < 1.5  # never waited for a copy's answer

        def failed() -> int:
            return figures(redis_url, gateway, "shadow", MIRROR).errors - before.errors

        assert wait_until(lambda: failed() == 10, 10)
    text = httpx.get(gateway.url + "/metrics", headers={"Authorization": "Bearer "
                     + gateway.settings.metrics_token}, trust_env=False).text  # fmt: skip
    assert metric(text, "wharf_gateway_mirror_copies_total", service="main", target="shadow",
                  outcome="5xx") >= 10  # fmt: skip
    assert metric(text, "wharf_gateway_mirror_copies_total", service="main", target="gone",
                  outcome="no_target") >= 10  # fmt: skip
