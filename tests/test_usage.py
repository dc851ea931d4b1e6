"""Usage: the flush from a real Redis into the configured database, and the usage API."""

from datetime import UTC, datetime

import pytest
import redis
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from contracts.usage import (
    FLUSHING_SUFFIX,
    SERVICE_TOKEN_ID,
    USAGE_PREFIX,
    usage_field,
    usage_key,
)
from controlplane.tokens.models import ApiKey, ApiToken
from controlplane.usage.flush import LOCK_KEY, flush_usage
from controlplane.usage.models import UsageRecord

pytestmark = pytest.mark.django_db

MINUTE = 29_000_000  # an epoch minute in 2025


@pytest.fixture
def store(redis_url):
    client = redis.Redis.from_url(redis_url)
    _clear(client)
    yield client
    _clear(client)


def _clear(client) -> None:
    for key in client.scan_iter(match=f"{USAGE_PREFIX}*"):
        client.delete(key)
    client.delete(LOCK_KEY)


def count(store, minute, service, key_id, prompt, completion, key_suffix=""):
    """What a gateway does after one call: add its tokens to the minute's hash."""
    key = usage_key(minute * 60) + key_suffix
    store.hincrby(key, usage_field(service, key_id, "prompt"), prompt)
    store.hincrby(key, usage_field(service, key_id, "completion"), completion)
    store.hincrby(key, usage_field(service, key_id, "requests"), 1)


def rows() -> dict:
    return {
        (r.minute, r.service, r.key_id): (r.prompt_tokens, r.completion_tokens, r.requests)
        for r in UsageRecord.objects.all()
    }


def at(minute: int) -> datetime:
    return datetime.fromtimestamp(minute * 60, tz=UTC)


def test_counts_add_up_across_flushes_of_different_minutes(store):
    count(store, MINUTE, "qwen", "k1", 10, 5)
    count(store, MINUTE, "qwen", "k1", 1, 2)
    count(store, MINUTE, "qwen", SERVICE_TOKEN_ID, 7, 7)
    assert flush_usage(store, (MINUTE + 1) * 60 + 5) == 1
    count(store, MINUTE, "qwen", "k1", 100, 100)  # a late count for a minute already flushed
    count(store, MINUTE + 1, "qwen", "k1", 3, 4)
    assert flush_usage(store, (MINUTE + 2) * 60) == 2
    assert rows() == {
        (at(MINUTE), "qwen", "k1"): (111, 107, 3),
        (at(MINUTE), "qwen", SERVICE_TOKEN_ID): (7, 7, 1),
        (at(MINUTE + 1), "qwen", "k1"): (3, 4, 1),
    }
    assert list(store.scan_iter(match=f"{USAGE_PREFIX}*")) == []


def test_the_current_minute_is_not_flushed(store):
    count(store, MINUTE, "qwen", "k1", 10, 5)
    assert flush_usage(store, MINUTE * 60 + 59) == 0
    assert UsageRecord.objects.count() == 0
    assert store.exists(usage_key(MINUTE * 60))


def test_a_leftover_flushing_key_is_recovered(store):
    count(store, MINUTE, "qwen", "k1", 10, 5, key_suffix=FLUSHING_SUFFIX)  # a crashed pass
    count(store, MINUTE, "qwen", "k1", 1, 1)  # counted after that pass renamed the minute
    assert flush_usage(store, (MINUTE + 1) * 60) == 2
    assert rows() == {(at(MINUTE), "qwen", "k1"): (11, 6, 2)}
    assert list(store.scan_iter(match=f"{USAGE_PREFIX}*")) == []


def test_one_flush_at_a_time(store):
    count(store, MINUTE, "qwen", "k1", 10, 5)
    store.set(LOCK_KEY, "another worker", ex=60)
    assert flush_usage(store, (MINUTE + 1) * 60) == 0
    store.delete(LOCK_KEY)
    assert flush_usage(store, (MINUTE + 1) * 60) == 1


def client_for(username: str, staff: bool = False) -> tuple[APIClient, object]:
    user = get_user_model().objects.create_user(username, is_staff=staff)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user, 'test')}")
    return client, user


def record(minute: int, service: str, key_id: str, prompt: int, completion: int, requests=1):
    UsageRecord.objects.create(
        minute=at(minute), service=service, key_id=key_id, prompt_tokens=prompt,
        completion_tokens=completion, requests=requests,
    )  # fmt: skip


@pytest.fixture
def usage():
    """Alice's key k<a> and Bob's key k<b>, over two hours; returns (alice, bob, staff, ids)."""
    alice, alice_user = client_for("alice")
    bob, bob_user = client_for("bob")
    staff, _ = client_for("root", staff=True)
    mine = ApiKey.issue(alice_user, "mine")[0].public_id
    theirs = ApiKey.issue(bob_user, "theirs")[0].public_id
    record(MINUTE, "qwen", mine, 10, 20)
    record(MINUTE + 1, "llama", mine, 1, 2, requests=2)
    record(MINUTE + 60, "qwen", mine, 100, 200)
    record(MINUTE, "qwen", theirs, 1000, 1000)
    record(MINUTE, "qwen", SERVICE_TOKEN_ID, 5, 5)
    return alice, bob, staff, mine


RANGE = {"since": at(MINUTE).isoformat(), "until": at(MINUTE + 24 * 60).isoformat()}


def test_totals_and_an_hourly_series_of_ones_own_keys(usage):
    alice, *_ = usage
    body = alice.get("/api/v1/usage", {**RANGE, "group": "hour"}).json()
    assert body["totals"] == {
        "requests": 4, "prompt_tokens": 111, "completion_tokens": 222, "total_tokens": 333,
        "avg_latency_ms": 0.0, "avg_ttft_ms": 0.0,
    }  # fmt: skip
    assert [(p["time"], p["requests"], p["total_tokens"]) for p in body["series"]] == [
        ("2025-02-19T21:00:00Z", 3, 33),  # MINUTE is 21:20
        ("2025-02-19T22:00:00Z", 1, 300),
    ]
    assert (body["group"], body["since"]) == ("hour", "2025-02-19T21:20:00Z")


def test_series_by_minute_and_day_and_filters(usage):
    alice, _, staff, mine = usage
    by_minute = alice.get("/api/v1/usage", {**RANGE, "group": "minute"}).json()["series"]
    assert [(p["time"][11:16], p["requests"]) for p in by_minute] == [
        ("21:20", 1), ("21:21", 2), ("22:20", 1),
    ]  # fmt: skip
    by_day = staff.get("/api/v1/usage", {**RANGE, "group": "day"}).json()
    assert by_day["totals"]["requests"] == 6
    assert [p["time"] for p in by_day["series"]] == ["2025-02-19T00:00:00Z"]
    llama = alice.get("/api/v1/usage", {**RANGE, "service": "llama"}).json()["totals"]
    assert llama["prompt_tokens"] == 1
    tokens = staff.get("/api/v1/usage", {**RANGE, "key": SERVICE_TOKEN_ID}).json()["totals"]
    assert tokens["total_tokens"] == 10
    assert staff.get("/api/v1/usage", {**RANGE, "key": mine}).json()["totals"]["requests"] == 4


def test_others_usage_is_invisible(usage):
    _, bob, _, mine = usage
    assert bob.get("/api/v1/usage", RANGE).json()["totals"]["requests"] == 1
    assert bob.get("/api/v1/usage", {**RANGE, "key": mine}).json()["totals"]["requests"] == 0
    assert bob.get("/api/v1/usage", {**RANGE, "key": "-"}).json()["series"] == []


def test_the_default_range_is_the_last_day(usage):
    alice, *_ = usage
    assert alice.get("/api/v1/usage").json()["totals"]["requests"] == 0  # 2025 is long gone


@pytest.mark.parametrize(
    ("params", "fields"),
    [
        ({"since": "yesterday", "group": "week"}, {"since", "group"}),
        ({"until": "2025-02-30T00:00:00Z"}, {"until"}),
        ({"since": "2030-01-01T00:00:00Z", "until": "2029-01-01T00:00:00Z"}, {"since"}),
        ({"since": "2000-01-01T00:00:00Z", "group": "minute"}, {"group"}),
        ({"key": "alice"}, {"key"}),
    ],
)
def test_bad_parameters_are_named(usage, params, fields):
    alice, *_ = usage
    response = alice.get("/api/v1/usage", params)
    assert response.status_code == 400
    assert set(response.json()["errors"]) == fields
    assert response.json()["detail"].startswith("The query is invalid")


def test_latency_sums_become_averages(store):
    key = usage_key(MINUTE * 60)
    for kind, value in (("requests", 4), ("latency_ms", 400), ("ttft_ms", 80)):
        store.hincrby(key, usage_field("llama", "-", kind), value)
    flush_usage(store, (MINUTE + 2) * 60)
    row = UsageRecord.objects.get()
    assert (row.requests, row.latency_ms, row.ttft_ms) == (4, 400, 80)
    staff, _ = client_for("root", staff=True)
    totals = staff.get("/api/v1/usage", RANGE).json()["totals"]
    assert (totals["avg_latency_ms"], totals["avg_ttft_ms"]) == (100.0, 20.0)
