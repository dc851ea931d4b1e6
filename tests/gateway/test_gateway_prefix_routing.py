"""prefix_cache routing against two real vLLM CPU engines with prefix caching on: requests
sharing a long prompt prefix all reach one engine, which its own prefix-cache counters show
(its hits grow; the other engine is never even asked), while least_outstanding spreads the
same requests over both.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest
from gateway_support import SECRET_KEY, Gateways, make_token, service, snapshot, unique

from contracts.engine_keys import engine_key
from contracts.routing import RoutedInstance
from tests import vllm_support
from tests.vllm_support import VLLM_PYTHON

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM CPU build at {VLLM_PYTHON}"),
]

NAMES = ("vllm-prefix-0", "vllm-prefix-1")
REQUESTS = 12
# About 300 tokens of the tiny model's byte-level BPE: several 32-token KV blocks.
SHARED = (
    "You are the support assistant of Wharf, a self-hosted control plane for serving large "
    "language models. Answer briefly and politely; cite the console page a user should open; "
    "never invent a command; when unsure, say so and point to the documentation. "
) * 4


@pytest.fixture(scope="module")
def vllm_engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RoutedInstance]]:
    """Two vLLM CPU engines serving the tiny model with prefix caching, keyed as instances."""
    from controlplane.services.tiny_model import write_tiny_model

    model = write_tiny_model(tmp_path_factory.mktemp("vllm-model") / "tiny")
    logs = tmp_path_factory.mktemp("vllm-logs")
    args = ["--max-model-len", "1024", "--enable-prefix-caching", "--block-size", "32"]
    started = [vllm_support.launch(model, logs / f"{name}.log", engine_key(SECRET_KEY, name), args)
               for name in NAMES]  # fmt: skip
    try:
        deadline = time.monotonic() + 400
        for (process, url), name in zip(started, NAMES, strict=True):
            vllm_support.wait_healthy(process, url, logs / f"{name}.log", deadline)
        yield [RoutedInstance(name, url) for name, (_, url) in zip(NAMES, started, strict=True)]
    finally:
        for process, _ in started:
            vllm_support.stop(process)


def prefix_counters(url: str) -> tuple[float, float]:
    """(queries, hits) of the engine's prefix cache, in tokens, from its own /metrics."""
    text = httpx.get(url + "/metrics", timeout=10, trust_env=False).text
    totals = {"vllm:prefix_cache_queries_total": 0.0, "vllm:prefix_cache_hits_total": 0.0}
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in totals:
            totals[name] += float(line.rsplit(" ", 1)[1])
    return totals["vllm:prefix_cache_queries_total"], totals["vllm:prefix_cache_hits_total"]


Growth = list[tuple[float, float]]


def send_shared_prefix(
    redis_url: str, engines: list[RoutedInstance], routing: str, tag: str
) -> tuple[Growth, list[str]]:
    """REQUESTS completions sharing SHARED (after `tag`, so that two runs share nothing)
    through a gateway with `routing`: each engine's (queries, hits) growth, and who answered."""
    token, digest = make_token()
    svc = replace(service(unique("tiny"), engines, [digest], models=("tiny",)), routing=routing)
    gateways = Gateways(redis_url)
    try:
        gateway = gateways.start(snapshot(1, svc), upstream_timeout=120)
        before = [prefix_counters(e.url) for e in engines]
        answered: list[str] = []
        with httpx.Client(timeout=120, trust_env=False) as client:
            for n in range(REQUESTS):
                body = {"model": "tiny", "prompt": f"{tag} {SHARED} Question {n}:", "max_tokens": 1}
                response = client.post(
                    gateway.url + "/v1/completions", json=body,
                    headers={"Authorization": f"Bearer {token}"},
                )  # fmt: skip
                assert response.status_code == 200, response.text
                answered.append(response.headers["x-wharf-instance"])
        after = [prefix_counters(e.url) for e in engines]
    finally:
        gateways.stop_all()
    growth = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(after, before, strict=True)]
    return growth, answered


def test_prefix_cache_sends_a_shared_prefix_to_one_engine(
    redis_url: str, vllm_engines: list[RoutedInstance]
) -> None:
    growth, answered = send_shared_prefix(redis_url, vllm_engines, "prefix_cache", "Ticket A.")
    assert len(set(answered)) == 1, answered
    owner = NAMES.index(answered[0])
    queries, hits = growth[owner]
    # The engine that got them all hit its cache on the shared part of every one but the first.
    assert hits > 0.5 * queries, growth
    assert growth[1 - owner] == (0, 0), growth


def test_least_outstanding_spreads_the_same_requests(
    redis_url: str, vllm_engines: list[RoutedInstance]
) -> None:
    growth, answered = send_shared_prefix(redis_url, vllm_engines, "least_outstanding", "Ticket B.")
    assert set(answered) == set(NAMES), answered
    # Both engines were asked, and both computed the shared prefix at least once.
    assert all(queries > 0 for queries, _ in growth), growth
