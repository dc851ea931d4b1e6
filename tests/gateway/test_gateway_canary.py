"""A canary release at a real gateway process: the calls split between the stable and the
canary instances exactly by the canary's weight, each call's figures land on its track for
the control plane to judge (contracts.canary), and a track with no instance takes none."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
from gateway_support import (
    Engine,
    GatewayProcess,
    call_figures,
    make_token,
    serve,
    service,
    snapshot,
    wait_until,
)

from contracts.call_figures import Figures
from contracts.routing import RoutedInstance

pytestmark = pytest.mark.timeout(60)

TOKEN, DIGEST = make_token()


@pytest.fixture(scope="module")
def gateway(figures_gateway: GatewayProcess) -> GatewayProcess:
    return figures_gateway


def route(redis_url, gateway, version: int, weight: int, stable: list[RoutedInstance],
          canary: list[RoutedInstance]) -> None:  # fmt: skip
    instances = stable + [RoutedInstance(i.name, i.url, track="canary") for i in canary]
    routed = service("svc", instances, [DIGEST], ("svc-model",), canary_weight=weight)
    serve(redis_url, gateway, snapshot(version, routed))


def calls(gateway: GatewayProcess, count: int) -> Counter:
    with httpx.Client(timeout=10, trust_env=False) as client:
        answered = [
            client.post(gateway.url + "/api/predict/svc/echo/x", content=b"{}",
                        headers={"Authorization": f"Bearer {TOKEN}"}).json()["instance"]
            for _ in range(count)
        ]  # fmt: skip
    return Counter(answered)


def track_figures(redis_url: str, gateway: GatewayProcess, track: str) -> Figures:
    return call_figures(redis_url, gateway, "svc", track)


def test_the_canary_takes_exactly_its_weight_and_its_figures_are_its_own(
    redis_url: str, gateway: GatewayProcess, engines: list[Engine]
):
    stable, canary = [engines[0].instance], [engines[1].instance]
    route(redis_url, gateway, 1, 10, stable, canary)
    assert calls(gateway, 200) == Counter({"engine-a": 180, "engine-b": 20})
    assert wait_until(lambda: track_figures(redis_url, gateway, "canary").requests == 20, 5)
    assert wait_until(lambda: track_figures(redis_url, gateway, "").requests == 180, 5)
    route(redis_url, gateway, 2, 50, stable, canary)
    assert calls(gateway, 100) == Counter({"engine-a": 50, "engine-b": 50})


def test_a_track_without_instances_takes_no_call(redis_url, gateway, engines):
    stable, canary = [engines[0].instance], [engines[1].instance]
    route(redis_url, gateway, 3, 0, stable, canary)  # rolled back: weight 0
    assert calls(gateway, 20) == Counter({"engine-a": 20})
    route(redis_url, gateway, 4, 10, [], canary)  # promoted, stable drained
    assert calls(gateway, 20) == Counter({"engine-b": 20})
