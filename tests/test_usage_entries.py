"""Sorting one usage hash's fields into entries and poison (pure: no Redis, no database)."""

import pytest

from controlplane.usage.entries import (
    LAST_MINUTE,
    MAX_COUNT,
    hash_problem,
    minute_start,
    sort_fields,
)

GOOD = {b"qwen|k1|prompt": b"10", b"qwen|k1|completion": b"5", b"qwen|k1|requests": b"1"}


def test_good_fields_become_one_entry_per_service_and_key():
    fields = {**GOOD, b"llama|-|requests": b"2", b"llama|-|latency_ms": b"400"}
    entries, poison = sort_fields(fields)
    assert poison == []
    assert {k: e.counts for k, e in entries.items()} == {
        ("qwen", "k1"): {"prompt_tokens": 10, "completion_tokens": 5, "requests": 1},
        ("llama", "-"): {"requests": 2, "latency_ms": 400},
    }
    assert entries[("qwen", "k1")].fields == GOOD


def test_zero_counts_are_nothing_to_write():
    entries, poison = sort_fields({b"qwen|k1|prompt": b"0", b"qwen|k2|prompt": b"0"})
    assert (entries, poison) == ({}, [])


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        (b"qwen|k2|prompt", b"many", "prompt_tokens: 'many' is not a count"),
        (b"qwen|k2|prompt", b"1.5", "is not a count"),
        (b"qwen|k2|prompt", b"-5", "is not a count"),
        (b"qwen|k2|prompt", str(MAX_COUNT + 1).encode(), "is not a count"),
        (b"qwen|k2|prompt", "１２".encode(), "is not a count"),  # int() would take it
        (b"qwen|k2|prompt", b"\xff", "is not a count"),
        ("x" * 64 + "|k2|prompt", b"1", "service name: at most 63 characters"),
        (b"qwen|" + b"k" * 33 + b"|prompt", b"1", "key id: at most 32 characters"),
        (b"qwen\x00|k2|prompt", b"1", "service name: must not contain control characters"),
    ],
)
def test_an_entry_with_one_bad_count_or_name_is_poison_whole(field, value, reason):
    field_text = field.decode() if isinstance(field, bytes) else field
    service, key_id, _ = field_text.split("|")
    other_kind = f"{service}|{key_id}|requests".encode()
    entries, poison = sort_fields({**GOOD, field: value, other_kind: b"1"})
    assert list(entries) == [("qwen", "k1")]  # the good entry, untouched
    (bad,) = poison
    assert bad.label == f"{service}|{key_id}" and reason in bad.reason
    assert bad.fields == {field: value, other_kind: b"1"}  # its requests too


@pytest.mark.parametrize(
    "field", [b"qwen|k1", b"qwen|k1|prompt|extra", b"qwen|k1|colour", b"\xff|k1|prompt", b""]
)
def test_a_field_that_is_no_usage_field_is_poison_alone(field):
    entries, poison = sort_fields({**GOOD, field: b"1"})
    assert entries[("qwen", "k1")].fields == GOOD
    (bad,) = poison
    assert bad.fields == {field: b"1"} and "not a usage field" in bad.reason


@pytest.mark.parametrize(
    ("key", "minute", "problem"),
    [
        ("wharf:usage:29000000:flushing:ab", 29_000_000, None),
        ("wharf:usage:1:flushing:" + "a" * 200, 1, "longer than 200"),
        (f"wharf:usage:{LAST_MINUTE}:flushing:ab", LAST_MINUTE, None),
        (f"wharf:usage:{LAST_MINUTE + 1}:flushing:ab", LAST_MINUTE + 1, "after the year 9999"),
    ],
)
def test_hash_problem(key, minute, problem):
    found = hash_problem(key, minute)
    assert found is None if problem is None else problem in found


def test_the_last_minute_has_a_start():
    assert minute_start(LAST_MINUTE).isoformat() == "9999-12-31T23:59:00+00:00"
