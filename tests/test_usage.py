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
    flushing_key,
    minute_of,
    usage_field,
    usage_key,
)
from controlplane.tokens.models import ApiKey, ApiToken
from controlplane.usage import flush
from controlplane.usage.flush import LOCK_KEY, flush_usage
from controlplane.usage.models import UsageBatch, UsageRecord

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


def count(store, minute, service, key_id, prompt, completion, key=None):
    """What a gateway does after one call: add its tokens to the minute's hash (or to `key`,
    a hash standing for one a flush left)."""
    key = key or usage_key(minute * 60)
    store.hincrby(key, usage_field(service, key_id, "prompt"), prompt)
    store.hincrby(key, usage_field(service, key_id, "completion"), completion)
    store.hincrby(key, usage_field(service, key_id, "requests"), 1)


def rows() -> dict:
    return {
        (r.minute, r.service, r.key_id): (r.prompt_tokens, r.completion_tokens, r.requests)
        for r in UsageRecord.objects.all()
    }


def usage_keys(store) -> list[str]:
    return sorted(k.decode() for k in store.scan_iter(match=f"{USAGE_PREFIX}*"))


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
    assert usage_keys(store) == []
    assert UsageBatch.objects.count() == 3  # one per hash written


def test_the_current_minute_is_not_flushed(store):
    count(store, MINUTE, "qwen", "k1", 10, 5)
    assert flush_usage(store, MINUTE * 60 + 59) == 0
    assert UsageRecord.objects.count() == 0
    assert store.exists(usage_key(MINUTE * 60))


def test_a_leftover_flushing_key_is_recovered(store):
    claimed = flushing_key(usage_key(MINUTE * 60))
    count(store, MINUTE, "qwen", "k1", 10, 5, key=claimed)  # a pass crashed before its commit
    count(store, MINUTE, "qwen", "k1", 1, 1)  # counted after that pass renamed the minute
    assert flush_usage(store, (MINUTE + 1) * 60) == 2
    assert rows() == {(at(MINUTE), "qwen", "k1"): (11, 6, 2)}
    assert usage_keys(store) == []


def test_a_leftover_already_written_is_only_deleted(store):
    claimed = flushing_key(usage_key(MINUTE * 60))
    count(store, MINUTE, "qwen", "k1", 10, 5, key=claimed)
    UsageBatch.objects.create(name=claimed, flushed_at=at(MINUTE + 1))  # its pass committed
    assert flush_usage(store, (MINUTE + 1) * 60) == 0
    assert rows() == {}
    assert usage_keys(store) == []


def test_an_older_workers_flushing_key_is_claimed_anew(store):
    """`…:flushing` without a claim id is what workers before UsageBatch renamed to."""
    legacy = usage_key(MINUTE * 60) + FLUSHING_SUFFIX
    count(store, MINUTE, "qwen", "k1", 10, 5, key=legacy)
    # Every claim of a minute had this name: a row for it says nothing about this hash.
    UsageBatch.objects.create(name=legacy, flushed_at=at(MINUTE))
    assert flush_usage(store, (MINUTE + 1) * 60) == 1
    assert rows() == {(at(MINUTE), "qwen", "k1"): (10, 5, 1)}
    assert usage_keys(store) == []


class CrashError(Exception):
    """A worker dying at that point: nothing after it runs."""


def crash_on_flushing_key(store, method: str):
    real = getattr(store, method)

    def crashing(key, *args):
        key = key.decode() if isinstance(key, bytes) else key
        if FLUSHING_SUFFIX in key:
            raise CrashError(f"{method} {key}")
        return real(key, *args)

    return crashing


@pytest.mark.parametrize("point", ["before reading", "in the transaction", "after the commit"])
def test_a_crash_anywhere_neither_loses_nor_double_counts(store, monkeypatch, point):
    count(store, MINUTE, "qwen", "k1", 10, 5)
    count(store, MINUTE, "qwen", "k2", 1, 2)
    count(store, MINUTE + 1, "qwen", "k1", 3, 4)
    with monkeypatch.context() as patch:
        if point == "before reading":  # the minute is renamed, then the worker dies
            patch.setattr(store, "hgetall", crash_on_flushing_key(store, "hgetall"))
        elif point == "in the transaction":  # one row updated, then the worker dies
            real_add = flush._add
            calls = []

            def add_then_crash(*args):
                calls.append(args)
                real_add(*args)
                if len(calls) == 1:
                    raise CrashError("between two rows")

            patch.setattr(flush, "_add", add_then_crash)
        else:  # the counts are in the database, the flushing key is not deleted yet
            patch.setattr(store, "delete", crash_on_flushing_key(store, "delete"))
        with pytest.raises(CrashError):
            flush_usage(store, (MINUTE + 2) * 60)
    leftovers = [k for k in usage_keys(store) if FLUSHING_SUFFIX in k]
    assert leftovers and all(minute_of(k) == MINUTE for k in leftovers)
    count(store, MINUTE, "qwen", "k1", 100, 100)  # a late count for the minute being flushed
    flush_usage(store, (MINUTE + 2) * 60)
    assert rows() == {
        (at(MINUTE), "qwen", "k1"): (110, 105, 2),
        (at(MINUTE), "qwen", "k2"): (1, 2, 1),
        (at(MINUTE + 1), "qwen", "k1"): (3, 4, 1),
    }
    assert usage_keys(store) == []


def test_batch_rows_are_pruned_after_a_day(store):
    count(store, MINUTE, "qwen", "k1", 10, 5)
    assert flush_usage(store, (MINUTE + 1) * 60) == 1
    assert UsageBatch.objects.count() == 1
    count(store, MINUTE + 1, "qwen", "k1", 1, 1)
    assert flush_usage(store, (MINUTE + 2) * 60 + 24 * 3600) == 1
    assert [b.flushed_at for b in UsageBatch.objects.all()] == [at(MINUTE + 2 + 24 * 60)]


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
