"""Usage: the flush from a real Redis into the configured database, and the usage API."""

import logging
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
from controlplane.services.models import Service
from controlplane.tokens.models import ApiKey, ApiToken
from controlplane.usage import flush
from controlplane.usage.dead_letter import DEAD_LETTER_PREFIX, DEAD_LETTER_TTL, WHOLE_KEY
from controlplane.usage.flush import LOCK_KEY, flush_usage
from controlplane.usage.models import UsageBatch, UsageRecord
from controlplane.workspaces.models import Workspace
from tests.api_support import default_workspace, member

pytestmark = pytest.mark.django_db

MINUTE = 29_000_000  # an epoch minute in 2025


@pytest.fixture
def store(redis_url):
    client = redis.Redis.from_url(redis_url)
    _clear(client)
    yield client
    _clear(client)


def _clear(client) -> None:
    for prefix in (USAGE_PREFIX, DEAD_LETTER_PREFIX):
        for key in client.scan_iter(match=f"{prefix}*"):
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


def test_a_flushed_minute_belongs_to_its_services_workspace_or_else_its_keys(store):
    team = Workspace.objects.create(name="team")
    Service.objects.create(workspace=team, name="qwen", spec={"name": "qwen"})
    owner = get_user_model().objects.create_user("owner")
    key = ApiKey.issue(owner, team, "app")[0].public_id
    count(store, MINUTE, "qwen", SERVICE_TOKEN_ID, 1, 1)
    count(store, MINUTE, "deleted", key, 1, 1)  # its service gone before the flush
    count(store, MINUTE, "deleted", SERVICE_TOKEN_ID, 1, 1)  # nothing left to tell
    assert flush_usage(store, (MINUTE + 1) * 60) == 1
    owners = {(r.service, r.key_id): r.workspace for r in UsageRecord.objects.all()}
    assert owners == {("qwen", SERVICE_TOKEN_ID): team, ("deleted", key): team,
                      ("deleted", SERVICE_TOKEN_ID): None}  # fmt: skip


def test_each_adapter_of_a_service_is_a_row_of_its_own(store):
    Service.objects.create(workspace=default_workspace(), name="qwen", spec={"name": "qwen"})
    count(store, MINUTE, "qwen", "k1", 10, 5)
    count(store, MINUTE, "qwen:sql", "k1", 3, 2)  # contracts.usage.usage_model
    count(store, MINUTE, "qwen:sql", "k1", 1, 1)
    count(store, MINUTE, "qwen:chat", "k1", 4, 4)
    count(store, MINUTE, "qwen:" + "x" * 65, "k1", 1, 1)  # no adapter has so long a name
    assert flush_usage(store, (MINUTE + 1) * 60) == 1
    found = {(r.service, r.adapter): (r.prompt_tokens, r.requests, r.workspace.name)
             for r in UsageRecord.objects.all()}  # fmt: skip
    assert found == {("qwen", ""): (10, 1, "default"), ("qwen", "sql"): (4, 2, "default"),
                     ("qwen", "chat"): (4, 1, "default")}  # fmt: skip


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


def dead_letters(store) -> dict[str, dict[bytes, bytes] | bytes]:
    """What the flush set aside, by dead-letter key (a whole key set aside may be no hash)."""
    found = {}
    for raw in store.scan_iter(match=f"{DEAD_LETTER_PREFIX}*"):
        key = raw.decode()
        assert 0 < store.ttl(key) <= DEAD_LETTER_TTL  # it goes away by itself
        found[key] = store.hgetall(key) if store.type(key) == b"hash" else store.get(key)
    return found


def test_poison_entries_are_set_aside_and_every_other_entry_written_once(store, caplog):
    count(store, MINUTE, "qwen", "k1", 10, 5)
    count(store, MINUTE, "llama", SERVICE_TOKEN_ID, 3, 4)
    count(store, MINUTE, "qwen", "k99999", 7, 0)  # no such key (any more): usage all the same
    count(store, MINUTE + 1, "qwen", "k1", 1, 1)
    key = usage_key(MINUTE * 60)
    poison = {
        usage_field("qwen", "k2", "prompt"): b"many",  # not a count: its entry goes whole,
        usage_field("qwen", "k2", "requests"): b"1",  # requests included
        usage_field("x" * 64, "k1", "prompt"): b"1",  # a service name longer than the column
        usage_field("qwen", "k" + "9" * 40, "prompt"): b"1",  # a key id longer than the column
        usage_field("qwen", "k3", "prompt"): b"-5",
        usage_field("qwen", "k4", "prompt"): b"1" * 30,  # past any count and bigint
        "qwen|k1": b"1",  # no kind: not a usage field
        usage_field("qwen", "k1", "colour"): b"1",
    }
    store.hset(key, mapping=poison)
    with caplog.at_level(logging.ERROR, logger="controlplane.usage"):
        assert flush_usage(store, (MINUTE + 2) * 60) == 2
    good = {
        (at(MINUTE), "qwen", "k1"): (10, 5, 1),
        (at(MINUTE), "llama", SERVICE_TOKEN_ID): (3, 4, 1),
        (at(MINUTE), "qwen", "k99999"): (7, 0, 1),
        (at(MINUTE + 1), "qwen", "k1"): (1, 1, 1),
    }
    assert rows() == good
    assert usage_keys(store) == []
    (dead, why) = sorted(dead_letters(store))
    assert why == f"{dead}:why" and dead.startswith(f"{DEAD_LETTER_PREFIX}{MINUTE}:flushing:")
    assert dead_letters(store)[dead] == {k.encode(): v for k, v in poison.items()}
    labels = {label.decode() for label in dead_letters(store)[why]}
    assert labels == {"qwen|k2", f"{'x' * 64}|k1", f"qwen|k{'9' * 40}", "qwen|k3", "qwen|k4",
                      "qwen|k1", "qwen|k1|colour"}  # fmt: skip
    logged = "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
    assert all(label in logged for label in labels)
    assert flush_usage(store, (MINUTE + 3) * 60) == 0  # nothing left over, nothing counted again
    assert rows() == good


def test_a_sum_the_database_refuses_is_set_aside_alone(store):
    UsageRecord.objects.create(minute=at(MINUTE), service="qwen", key_id="k1",
                               prompt_tokens=2**63 - 10)  # fmt: skip
    count(store, MINUTE, "qwen", "k1", 100, 5)  # 2**63 - 10 + 100 is past a bigint
    count(store, MINUTE, "qwen", "k2", 1, 2)
    assert flush_usage(store, (MINUTE + 1) * 60) == 1
    assert rows() == {
        (at(MINUTE), "qwen", "k1"): (2**63 - 10, 0, 0),  # its savepoint rolled back alone
        (at(MINUTE), "qwen", "k2"): (1, 2, 1),
    }
    letters = dead_letters(store)
    (why,) = [key for key in letters if key.endswith(":why")]
    assert list(letters[why]) == [b"qwen|k1"]
    assert b"the database refused it" in letters[why][b"qwen|k1"]
    assert usage_keys(store) == []


def test_usage_keys_that_cannot_be_flushed_are_moved_aside_whole(store, caplog):
    not_a_hash = flushing_key(usage_key(MINUTE * 60))
    store.set(not_a_hash, "a string")
    past_9999 = f"{USAGE_PREFIX}{10**12}{FLUSHING_SUFFIX}:ab"
    too_long = f"{USAGE_PREFIX}{MINUTE}{FLUSHING_SUFFIX}:{'ab' * 100}"  # UsageBatch.name: 200
    for key in (past_9999, too_long):
        count(store, MINUTE, "qwen", "k1", 10, 5, key=key)
    count(store, MINUTE, "qwen", "k1", 1, 1)
    with caplog.at_level(logging.ERROR, logger="controlplane.usage"):
        assert flush_usage(store, (MINUTE + 1) * 60) == 1
    assert rows() == {(at(MINUTE), "qwen", "k1"): (1, 1, 1)}
    assert usage_keys(store) == []
    letters = dead_letters(store)
    for key in (not_a_hash, past_9999, too_long):
        moved = DEAD_LETTER_PREFIX + key.removeprefix(USAGE_PREFIX)
        assert WHOLE_KEY.encode() in letters[f"{moved}:why"]
        assert key in caplog.text
    assert letters[DEAD_LETTER_PREFIX + not_a_hash.removeprefix(USAGE_PREFIX)] == b"a string"
    assert flush_usage(store, (MINUTE + 2) * 60) == 0


def test_a_key_under_the_prefix_that_is_no_usage_key_does_not_stop_the_flush(store):
    store.hset(f"{USAGE_PREFIX}\xff".encode("latin-1"), "qwen|k1|prompt", 1)  # not UTF-8
    count(store, MINUTE, "qwen", "k1", 10, 5)
    assert flush_usage(store, (MINUTE + 1) * 60) == 1
    assert rows() == {(at(MINUTE), "qwen", "k1"): (10, 5, 1)}
    store.delete(f"{USAGE_PREFIX}\xff".encode("latin-1"))


def client_for(username: str, workspace: str, staff: bool = False) -> tuple[APIClient, object]:
    user = get_user_model().objects.create_user(username, is_staff=staff)
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user, member(user, 'viewer', workspace), 't')}"
    )
    return client, user


def record(minute: int, service: str, key_id: str, prompt: int, completion: int, requests=1,
           workspace=None):  # fmt: skip
    UsageRecord.objects.create(
        minute=at(minute), service=service, key_id=key_id, prompt_tokens=prompt,
        completion_tokens=completion, requests=requests, workspace=workspace,
    )  # fmt: skip


@pytest.fixture
def usage():
    """Alice's workspace a with her key k<a>, Bob's workspace b with his key k<b>, over two
    hours, and a service token's usage of a service gone with its workspace; returns (alice,
    bob, staff, alice's key id)."""
    alice, alice_user = client_for("alice", "a")
    bob, bob_user = client_for("bob", "b")
    staff, _ = client_for("root", "default", staff=True)
    a, b = Workspace.objects.get(name="a"), Workspace.objects.get(name="b")
    mine = ApiKey.issue(alice_user, a, "mine")[0].public_id
    theirs = ApiKey.issue(bob_user, b, "theirs")[0].public_id
    record(MINUTE, "qwen", mine, 10, 20, workspace=a)
    record(MINUTE + 1, "llama", mine, 1, 2, requests=2, workspace=a)
    record(MINUTE + 60, "qwen", mine, 100, 200, workspace=a)
    record(MINUTE, "mistral", theirs, 1000, 1000, workspace=b)
    record(MINUTE, "gone", SERVICE_TOKEN_ID, 5, 5)
    return alice, bob, staff, mine


RANGE = {"since": at(MINUTE).isoformat(), "until": at(MINUTE + 24 * 60).isoformat()}


def test_totals_and_an_hourly_series_of_ones_workspace(usage):
    alice, *_ = usage
    body = alice.get("/api/v1/usage", {**RANGE, "group": "hour"}).json()
    assert body["totals"] == {
        "requests": 4, "prompt_tokens": 111, "completion_tokens": 222, "total_tokens": 333,
        "avg_latency_ms": 0.0, "avg_ttft_ms": 0.0,
        "batch_requests": 0, "batch_prompt_tokens": 0, "batch_completion_tokens": 0,
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


def test_each_services_model_and_adapter_is_a_row_and_a_filter(usage):
    alice, *_ = usage
    a = Workspace.objects.get(name="a")
    UsageRecord.objects.create(
        minute=at(MINUTE),
        service="qwen",
        key_id="-",
        adapter="sql",
        prompt_tokens=7,
        completion_tokens=3,
        requests=2,
        workspace=a,
    )
    body = alice.get("/api/v1/usage", RANGE).json()
    assert [(m["service"], m["adapter"], m["requests"], m["total_tokens"])
            for m in body["models"]] == [
        ("llama", "", 2, 3), ("qwen", "", 2, 330), ("qwen", "sql", 2, 10),
    ]  # fmt: skip
    sql = alice.get("/api/v1/usage", {**RANGE, "adapter": "sql"}).json()["totals"]
    base = alice.get("/api/v1/usage", {**RANGE, "service": "qwen", "adapter": "-"}).json()
    assert (sql["total_tokens"], base["totals"]["total_tokens"]) == (10, 330)
    bad = alice.get("/api/v1/usage", {**RANGE, "adapter": "a:b"})
    assert bad.status_code == 400 and set(bad.json()["errors"]) == {"adapter"}


def test_each_key_is_a_row(usage):
    alice, _, staff, mine = usage
    mine_only = alice.get("/api/v1/usage", RANGE).json()["keys"]
    assert [(row["key_id"], row["requests"], row["total_tokens"]) for row in mine_only] == [
        (mine, 4, 333)]  # fmt: skip
    body = staff.get("/api/v1/usage", RANGE).json()
    by_key = {row["key_id"]: row["requests"] for row in body["keys"]}
    assert by_key[mine] == 4 and by_key[SERVICE_TOKEN_ID] == 1 and len(by_key) == 3
    assert sum(by_key.values()) == body["totals"]["requests"]


def test_other_workspaces_usage_is_invisible(usage):
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
        ({"until": "0001-01-01T00:00:00Z"}, {"until"}),  # the default since, a day before: 500
        ({"since": "0001-01-01"}, {"since"}),  # was blamed on group
        ({"since": "1969-12-31T23:59:59Z", "group": "day"}, {"since"}),
        ({"since": "9999-12-31T23:59:59+14:00"}, {"since"}),
        ({"until": "9999-12-31T23:59:59-14:00"}, {"until"}),  # year 10000 in UTC
        ({"since": "10000-01-01"}, {"since"}),
        ({"since": "1e30", "until": "-1"}, {"since", "until"}),
        ({"group": "week"}, {"group"}),
        ({"group": ["hour", "day"]}, {"group"}),  # which one? was the last
        ({"service": "\x00"}, {"service"}),  # PostgreSQL stores no NUL: was a 500
        ({"service": "x" * 64}, {"service"}),  # longer than any service name
        ({"key": "k" + "9" * 11}, {"key"}),  # longer than any key id
        ({"key": "k٣"}, {"key"}),  # a digit, but not one a key id has
        ({"limit": "-1", "servce": "qwen"}, {"limit", "servce"}),  # a typo answered everything
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
    staff, _ = client_for("root", "default", staff=True)
    totals = staff.get("/api/v1/usage", RANGE).json()["totals"]
    assert (totals["avg_latency_ms"], totals["avg_ttft_ms"]) == (100.0, 20.0)
