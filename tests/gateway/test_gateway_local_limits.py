"""The in-process fallback limits (used while Redis is down): the script's rules, in memory."""

from __future__ import annotations

from gateway.limits.local import LocalLimits
from gateway.limits.rules import (
    ADMITTED,
    OVER_CONCURRENCY,
    OVER_RPM,
    OVER_RPS,
    OVER_TPM,
    QUEUE_FULL,
    TOO_LARGE,
    Demand,
    duration,
)

# gateway.limits.rules' slots: the fixed keys, then one lease set per candidate instance.
KEYS = ["rps", "rpm", "tpm", "tpm:amounts", "leases", "service-leases", "instance-a", "instance-b"]


def admit(limits: LocalLimits, demand: Demand, request_id: str, now: float) -> int:
    return limits.admit(demand, KEYS, request_id, now).code


def test_requests_per_second_slide_with_time() -> None:
    limits = LocalLimits(second_s=1.0, minute_s=60.0)
    demand = Demand("svc", rate_limit=2)
    assert [admit(limits, demand, str(i), 10.0 + i * 0.1) for i in range(3)] == [
        ADMITTED,
        ADMITTED,
        OVER_RPS,
    ]
    verdict = limits.admit(demand, KEYS, "x", 10.5)
    assert (verdict.code, verdict.retry_ms) == (OVER_RPS, 500)  # the first leaves at 11.0
    assert admit(limits, demand, "y", 11.0) == ADMITTED


def test_requests_per_minute_report_what_is_left() -> None:
    limits = LocalLimits(second_s=1.0, minute_s=60.0)
    demand = Demand("svc", key_id="k", rpm=2)
    first = limits.admit(demand, KEYS, "a", 0.0)
    assert (first.rpm_left, first.rpm_reset_ms) == (1, 60_000)
    assert limits.admit(demand, KEYS, "b", 30.0).rpm_left == 0
    refused = limits.admit(demand, KEYS, "c", 45.0)
    assert (refused.code, refused.retry_ms) == (OVER_RPM, 15_000)


def test_tokens_per_minute_are_corrected_by_real_usage() -> None:
    limits = LocalLimits(second_s=1.0, minute_s=60.0)
    demand = Demand("svc", key_id="k", tpm=100, tokens=60)
    assert admit(limits, demand, "a", 0.0) == ADMITTED
    assert admit(limits, demand, "b", 1.0) == OVER_TPM
    limits.correct("tpm", "a", 10)
    assert admit(limits, demand, "b", 2.0) == ADMITTED
    assert admit(limits, Demand("svc", key_id="k", tpm=100, tokens=101), "c", 3.0) == TOO_LARGE


def test_leases_bound_concurrency_and_queues_until_released() -> None:
    limits = LocalLimits(second_s=1.0, minute_s=60.0)
    demand = Demand("svc", key_id="k", max_concurrency=1)
    assert admit(limits, demand, "a", 0.0) == ADMITTED
    assert admit(limits, demand, "b", 0.0) == OVER_CONCURRENCY
    limits.release(["leases"], "a")
    assert admit(limits, demand, "b", 0.0) == ADMITTED

    queued = Demand("svc", instances=("a", "b"), queue_size=1)
    assert limits.admit(queued, KEYS, "q1", 0.0).chosen == 1
    assert limits.admit(queued, KEYS, "q2", 0.0).chosen == 2  # the full one is passed over
    assert admit(limits, queued, "q3", 0.0) == QUEUE_FULL


def test_reset_durations_are_written_as_openai_does() -> None:
    assert [duration(ms) for ms in (20, 1000, 1500, 60_000, 360_000)] == [
        "20ms",
        "1s",
        "1.5s",
        "1m0s",
        "6m0s",
    ]
