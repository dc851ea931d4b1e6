"""An API key's rpm and tpm hold its batch requests back (gateway.queues.holds): what a batch
request asks of the limits, as tables; the store's lease skipping a held key's requests; then a
real gateway process (a short "minute") feeding a real engine process from a live API server:
a key with rpm=2 starts at most 2 of its 6 batch lines per window while another key's batch
runs meanwhile, and a line larger than the key's whole tpm is answered with a 429."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from contracts.routing import RoutedKey
from controlplane.batches.models import Batch
from controlplane.queues import store
from controlplane.queues.models import ItemState, QueueItem
from controlplane.services.models import Service
from controlplane.services.routing import publish_snapshot
from gateway.limits.rules import Refusal
from gateway.queues.holds import DEFAULT_HOLD_S, batch_demand, hold_s
from gateway.relay.body import DEFAULT_MAX_TOKENS
from tests.api_support import default_workspace
from tests.test_async_queues import ROOT, _wait
from tests.test_batches import (
    _jsonl,
    _line,
    _run,
    _serves,
    _until,
    chat_on_an_echo_engine,
)
from tests.test_eas_sdk import _free_port

KEY = RoutedKey("k7", rpm=2, tpm=1000)


def _item(body: dict | bytes, path: str = "/v1/chat/completions") -> dict:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return {"data": base64.b64encode(raw).decode(), "path": path, "batch": "b", "key_id": "k7"}


CHAT = {"model": "chat", "messages": [], "max_tokens": 50}
CHAT_BYTES = len(json.dumps(CHAT))
EMBED = {"model": "e", "input": "some text"}


@pytest.mark.parametrize(
    ("item", "tokens"),
    [
        (_item(CHAT), CHAT_BYTES // 4 + 50),  # a quarter of the body + its max_tokens
        (_item({**CHAT, "n": 3}), len(json.dumps({**CHAT, "n": 3})) // 4 + 150),
        (_item(EMBED, "/v1/embeddings"), len(json.dumps(EMBED)) // 4),  # no completion budget
        (_item(b"not json"), 2 + DEFAULT_MAX_TOKENS),  # as an online call's
    ],
)
def test_what_a_batch_request_asks_of_its_keys_limits(item, tokens):
    demand = batch_demand("chat", KEY, item)
    assert (demand.key_id, demand.rpm, demand.tpm) == ("k7", 2, 1000)
    assert demand.tokens == tokens
    assert not demand.rate_limit and not demand.max_concurrency and not demand.instances


@pytest.mark.parametrize(
    ("headers", "held"),
    [
        ({"retry-after": "3", "retry-after-ms": "2500"}, 2.5),
        ({"retry-after-ms": "0"}, 0.05),  # never a busy loop
        ({}, DEFAULT_HOLD_S),
    ],
)
def test_a_refused_key_is_held_for_the_limiters_hint(headers, held):
    assert hold_s(Refusal("key_rpm", "requests", "m", headers)) == held


@pytest.mark.django_db
def test_a_lease_skips_the_batch_requests_of_held_keys_only():
    workspace = default_workspace()
    chat = Service.objects.create(name="chat", workspace=workspace, spec={
        "name": "chat", "metadata": {"rpc": {"worker_threads": 10}},
        "containers": [{"image": "i", "command": "c", "port": 8000}]})  # fmt: skip
    batch = Batch.objects.create(id="batch_1", workspace=workspace, key_id="k1",
                                 endpoint="/v1/chat/completions", input_file_id="f",
                                 expires_at=timezone.now() + timedelta(hours=24))  # fmt: skip
    for key in ("k1", "k1", "k2"):
        QueueItem.objects.create(service=chat, queue="input", request_id=f"r{key}", data=b"{}",
                                 key_id=key, batch=batch)  # fmt: skip
    taken = store.lease(chat, "gw", ["chat-0"], 30, held_keys=frozenset({"k1"}))
    assert [item.key_id for item in taken] == ["k2"]
    assert QueueItem.objects.filter(key_id="k1", state=ItemState.PENDING).count() == 2
    again = store.lease(chat, "gw", ["chat-0"], 30)  # the hold ended
    assert sorted(item.key_id for item in again) == ["k1", "k1"]


# End to end, on PostgreSQL (the live server's threads, as tests/test_async_queues.py says).

MINUTE_S = 3.0  # the gateway's "minute" for rpm and tpm (gateway.config.Settings.minute_s)
LIVE = pytest.mark.skipif(connection.vendor == "sqlite", reason="needs PostgreSQL (its queues)")


class _ShortMinuteGateway:
    """A gateway process (tests/gateway/serve_gateway.py) whose rpm/tpm "minute" is short."""

    def __init__(self, live_url: str, redis_url: str, log) -> None:  # noqa: ANN001
        self.address = f"127.0.0.1:{_free_port()}"
        fields = {"redis_url": redis_url, "secret_key": django_settings.WHARF_TOKEN_KEY,
                  "api_url": live_url, "minute_s": MINUTE_S, "snapshot_poll": 0.2,
                  "queue_lease": 3.0, "limits_prefix": "wharf:test-holds:"}  # fmt: skip
        port = self.address.split(":")[1]
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(ROOT / "tests/gateway/serve_gateway.py"), port,
                 json.dumps(fields)],
                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},  # Wharf's own packages
            )  # fmt: skip

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture
def limited(api, store, settings, redis_url, live_server, tmp_path) -> Iterator[dict]:
    import openai  # noqa: PLC0415

    engine = chat_on_an_echo_engine(api, settings, tmp_path)
    slow = api.post("/api/v1/keys", {"name": "slow", "rpm": 2, "tpm": 100_000}, format="json")
    free = api.post("/api/v1/keys", {"name": "free"}, format="json")
    tight = api.post("/api/v1/keys", {"name": "tight", "tpm": 500}, format="json")
    assert {slow.status_code, free.status_code, tight.status_code} == {201}, slow.json()
    publish_snapshot(force=True)
    gateway = _ShortMinuteGateway(live_server.url, redis_url, tmp_path / "gateway.log")
    base = f"http://{gateway.address}/v1"
    made = {name: openai.OpenAI(base_url=base, api_key=key.json()["key"], max_retries=0)
            for name, key in (("slow", slow), ("free", free), ("tight", tight))}  # fmt: skip
    try:
        _wait(lambda: _serves(made["free"]))
        yield {**made, "engine": engine, "log": tmp_path / "gateway.log"}
    finally:
        gateway.stop()
        engine.kill()


@pytest.mark.django_db(transaction=True)
@LIVE
def test_a_keys_rpm_starts_at_most_that_many_batch_requests_per_window(limited):
    slow = _run(limited["slow"], [_line(f"s{i}", tag=f"s{i}") for i in range(6)])
    _wait(lambda: len(limited["engine"].log()) >= 2)
    free = _run(limited["free"], [_line(f"f{i}", tag=f"f{i}") for i in range(3)])
    done = _until(limited["free"], free.id, "completed", timeout=MINUTE_S * 3)
    assert done.request_counts.completed == 3
    _until(limited["slow"], slow.id, "completed", timeout=MINUTE_S * 6)
    log = limited["engine"].log()
    starts = sorted(started for tag, started, _ in log if tag.startswith("s"))
    assert len(starts) == 6  # each line ran once: none lost, none twice
    for first, third in zip(starts, starts[2:], strict=False):
        # The limiter admits before the engine starts: some slack for the way there (without
        # the hold, all six start within a fraction of a second).
        assert third - first >= MINUTE_S - 0.5, (starts, limited["log"].read_text()[-2000:])
    # The other key's lines did not wait for the held key's window.
    free_starts = [started for tag, started, _ in log if tag.startswith("f")]
    assert max(free_starts) < starts[4], (starts, free_starts)
    lines = _jsonl(limited["slow"], limited["slow"].batches.retrieve(slow.id).output_file_id)
    assert {line["response"]["status_code"] for line in lines.values()} == {200}
    assert set(lines) == {f"s{i}" for i in range(6)}


@pytest.mark.django_db(transaction=True)
@LIVE
def test_a_batch_line_larger_than_the_keys_tpm_is_answered_with_a_429(limited):
    tight = limited["tight"]
    batch = _run(tight, [_line("big", max_tokens=10_000), _line("small", max_tokens=10)])
    done = _until(tight, batch.id, "completed", timeout=MINUTE_S * 4)
    lines = _jsonl(tight, done.output_file_id)
    assert lines["small"]["response"]["status_code"] == 200
    big = lines["big"]["response"]
    assert big["status_code"] == 429 and "tokens per minute limit is 500" in json.dumps(big)
    assert [tag for tag, *_ in limited["engine"].log()] == [""]  # only the small one ran
