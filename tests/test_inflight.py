"""contracts.inflight: when an instance taken out of routing has no request left at any gateway."""

from __future__ import annotations

import json
import logging
import uuid

import pytest
import redis

from contracts.inflight import (
    INFLIGHT_PREFIX,
    drained,
    encode_report,
    read_reports,
    report_key,
    service_load,
)

REMOVED_AT = 1_717_000_000_123  # ms: the version of the snapshot without the instance


def report(snapshot: int = REMOVED_AT, **in_flight: int) -> dict:
    return {"at": 1_717_000_001.5, "snapshot": snapshot, "in_flight": in_flight}


@pytest.mark.parametrize(
    ("reports", "expected"),
    [
        pytest.param([], True, id="no gateway running"),
        pytest.param([report()], True, id="serves the removal, idle"),
        pytest.param([report(REMOVED_AT + 5_000)], True, id="serves a later snapshot"),
        pytest.param([report(REMOVED_AT - 1)], False, id="one stale snapshot"),
        pytest.param([report(), report(REMOVED_AT - 1)], False, id="one of two gateways stale"),
        pytest.param([report(**{"qwen-0": 1})], False, id="request in flight"),
        pytest.param([report(), report(**{"qwen-0": 3})], False, id="in flight at a 2nd gateway"),
        pytest.param([report(**{"qwen-1": 4})], True, id="other instance busy"),
        pytest.param([report(**{"qwen-0": 0})], True, id="an explicit zero"),
        pytest.param(["not a dict", 7, None, [1]], True, id="malformed: not objects"),
        pytest.param([{"in_flight": {"qwen-0": 1}}], True, id="malformed: no snapshot"),
        pytest.param([{"snapshot": "1", "in_flight": {}}], True, id="malformed: snapshot a string"),
        pytest.param([{"snapshot": True, "in_flight": {}}], True, id="malformed: snapshot a bool"),
        pytest.param([{"snapshot": REMOVED_AT}], True, id="malformed: no in_flight"),
        pytest.param([report() | {"in_flight": [1]}], True, id="malformed: in_flight a list"),
        pytest.param([report(**{"qwen-0": "1"})], True, id="malformed: a count as a string"),
        pytest.param([report(**{"qwen-0": -1})], True, id="malformed: a negative count"),
        pytest.param(["junk", report(REMOVED_AT - 1)], False, id="malformed next to a stale one"),
        pytest.param(["junk", report(**{"qwen-0": 1})], False, id="malformed next to a busy one"),
    ],
)
def test_drained(reports: list, expected: bool) -> None:
    assert drained(reports, "qwen-0", REMOVED_AT) is expected


def test_malformed_reports_are_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="contracts.inflight"):
        assert drained([{"snapshot": "x"}], "qwen-0", REMOVED_AT)
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]


def test_encoded_report_leaves_idle_instances_out() -> None:
    decoded = json.loads(encode_report(12.5, REMOVED_AT, {"a": 2, "b": 0}))
    assert decoded == {"at": 12.5, "snapshot": REMOVED_AT, "in_flight": {"a": 2}}
    assert not drained([decoded], "a", REMOVED_AT)
    assert drained([decoded], "b", REMOVED_AT)


def test_report_key_default_prefix() -> None:
    assert report_key("ab12") == "wharf:inflight:ab12" == INFLIGHT_PREFIX + "ab12"


@pytest.fixture
def prefix(redis_url: str):
    """A key prefix of this test's own in the shared test Redis (real gateways use theirs)."""
    prefix = f"wharf:test:{uuid.uuid4().hex}:inflight:"
    yield prefix
    with redis.Redis.from_url(redis_url) as client:
        for key in client.scan_iter(match=prefix + "*"):
            client.delete(key)


@pytest.mark.parametrize("decode_responses", [False, True])
def test_read_reports_from_redis(redis_url: str, prefix: str, decode_responses: bool) -> None:
    with redis.Redis.from_url(redis_url, decode_responses=decode_responses) as client:
        assert read_reports(client, prefix) == []
        busy = encode_report(1.0, REMOVED_AT, {"qwen-0": 2})
        client.set(report_key("g1", prefix), busy, ex=5)
        client.set(report_key("g2", prefix), encode_report(2.0, REMOVED_AT, {}), ex=5)
        client.set(report_key("bad-json", prefix), "{not json", ex=5)
        client.set(report_key("not-utf8", prefix), b"\xff\xfe", ex=5)
        client.set(report_key("not-object", prefix), "[1, 2]", ex=5)
        # Another prefix (another deployment, or the real one) is not read.
        other = prefix.removesuffix(":") + "-other:g3"
        client.set(other, busy, ex=5)

        reports = read_reports(client, prefix)

        assert sorted(reports, key=lambda r: r["at"]) == [
            {"at": 1.0, "snapshot": REMOVED_AT, "in_flight": {"qwen-0": 2}},
            {"at": 2.0, "snapshot": REMOVED_AT, "in_flight": {}},
        ]
        assert not drained(reports, "qwen-0", REMOVED_AT)
        client.delete(report_key("g1", prefix), other)
        assert drained(read_reports(client, prefix), "qwen-0", REMOVED_AT)


def test_rates_and_held_requests_are_reported_and_summed_over_gateways() -> None:
    one = json.loads(encode_report(1.0, REMOVED_AT, {"a-0": 2}, {"a": 1.5, "b": 0.0}, {"z": 2}))
    assert one == {"at": 1.0, "snapshot": REMOVED_AT, "in_flight": {"a-0": 2},
                   "qps": {"a": 1.5}, "held": {"z": 2}}  # fmt: skip
    two = json.loads(encode_report(1.2, REMOVED_AT, {"a-0": 1, "a-1": 3}, {"a": 0.5}, {"z": 1}))
    malformed = {"snapshot": "x", "in_flight": {}, "qps": {"a": 100}}
    bad_entries = {"snapshot": 1, "in_flight": {}, "qps": {"a": "9", "b": True}, "held": {"z": -1}}
    qps, in_flight, held = service_load([one, two, malformed, bad_entries])
    assert qps == {"a": 2.0}
    assert in_flight == {"a-0": 3, "a-1": 3}
    assert held == {"z": 3}
