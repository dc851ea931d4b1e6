"""EAS's scheduled scaling as pure code: the cronscaler's schema and spellings, which job fired
last (time zones, excluded dates), and what a fire does to the autoscaler's state."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contracts.eas import normalise
from contracts.spec import SpecError, parse_spec
from contracts.spec_cron import Cronscaler, Fire, latest_fire
from workers.scaling.autoscaler import State, scheduled

BASE = {"name": "web", "containers": [{"image": "img", "command": "serve", "port": 8000}]}
DAY_NIGHT = {"scaleJobs": [
    {"name": "day", "schedule": "0 9 * * *", "targetSize": 4},
    {"name": "night", "schedule": "0 21 * * *", "targetSize": 1},
]}  # fmt: skip


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def errors_of(spec: dict) -> dict:
    with pytest.raises(SpecError) as caught:
        parse_spec(normalise(spec))
    return caught.value.errors


@pytest.mark.parametrize(
    ("cron", "now", "fired"),
    [
        # the latest fire of either job
        (DAY_NIGHT, "2026-11-28 10:00", ("day", 4, "2026-11-28 09:00")),
        (DAY_NIGHT, "2026-11-28 22:30", ("night", 1, "2026-11-28 21:00")),
        (DAY_NIGHT, "2026-11-28 08:59", ("night", 1, "2026-11-27 21:00")),
        # the fire's own minute counts
        (DAY_NIGHT, "2026-11-28 09:00", ("day", 4, "2026-11-28 09:00")),
        # a job's time zone: 09:00 in Shanghai is 01:00 UTC
        ({"scaleJobs": [{"name": "cn", "schedule": "0 9 * * *", "targetSize": 2,
                         "timeZone": "Asia/Shanghai"}]},
         "2026-11-28 00:59", ("cn", 2, "2026-11-27 01:00")),
        # an excluded date does not count: the job before it does
        ({**DAY_NIGHT, "excludeDates": ["* * 28 11 *"]},
         "2026-11-28 10:00", ("night", 1, "2026-11-27 21:00")),
        # weekdays only: on a Saturday the latest is Friday's
        ({"scaleJobs": [{"name": "weekday", "schedule": "0 9 * * 1-5", "targetSize": 3}]},
         "2026-11-28 12:00", ("weekday", 3, "2026-11-27 09:00")),
        # nothing within the lookback (a date that never comes): no fire
        ({"scaleJobs": [{"name": "never", "schedule": "0 0 30 2 *", "targetSize": 3}]},
         "2026-11-28 12:00", None),
    ],
)  # fmt: skip
def test_the_latest_fire_is_the_latest_job_not_excluded(cron, now, fired):
    fire = latest_fire(Cronscaler.model_validate(cron), at(now))
    if fired is None:
        assert fire is None
    else:
        job, target, when = fired
        assert fire == Fire(at(when), job, target)


@pytest.mark.parametrize(
    ("state", "fire", "bounds", "replicas", "floor", "words"),
    [
        # a new fire sets the count, within the autoscaler's bounds
        (State(2), Fire(100.0, "day", 4), (0, 10), 4, 4, "cronscaler job day → 4"),
        (State(2), Fire(100.0, "day", 40), (1, 8), 8, 8, "held to 8 by the autoscaler's 1..8"),
        # a fire already applied changes nothing (the autoscaler may have moved since)
        (State(6, fired=(100.0, "day", 4)), Fire(100.0, "day", 4), (0, 10), 6, 4, ""),
        # the same fire with a new target (the spec changed) applies again
        (State(6, fired=(100.0, "day", 4)), Fire(100.0, "day", 2), (0, 10), 2, 2, "→ 2"),
        # no schedule: nothing, and no floor
        (State(3, fired=(100.0, "day", 4)), None, (0, 10), 3, None, ""),
    ],
)  # fmt: skip
def test_a_fire_applies_once_and_leaves_a_floor(state, fire, bounds, replicas, floor, words):
    after, got_floor, why = scheduled(state, fire, *bounds, now=200.0)
    assert (after.replicas, got_floor) == (replicas, floor)
    assert words in why and (why == "") == (words == "")
    if why:
        assert after.recommendations == ((200.0, replicas),)  # the windows start again
    assert State.from_json(after.to_json(), default=0, now=0.0) == after


def test_eas_spellings_of_the_cronscaler_and_the_legacy_autoscaler_are_canonical():
    sent = {**BASE, "metadata": {"cronscaler": {"ScaleJobs": [
        {"Name": "day", "Schedule": "0 9 * * *", "TargetSize": "4", "TimeZone": "Asia/Shanghai"}],
        "ExcludeDates": ["* * 1 1 *"]}},
        "autoscaler": {"min": 1, "max": 5, "strategies": {"qps": 10}}}  # fmt: skip
    spec = parse_spec(normalise(sent))
    assert spec.cronscaler is not None
    assert spec.cronscaler.scaleJobs[0].model_dump() == {
        "name": "day",
        "schedule": "0 9 * * *",
        "targetSize": 4,
        "timeZone": "Asia/Shanghai",
    }
    assert spec.cronscaler.excludeDates == ["* * 1 1 *"]
    assert spec.autoscaler is not None
    assert [(s.metricName, s.threshold) for s in spec.autoscaler.scaleStrategies] == [("qps", 10)]
    # the cronscaler shapes no instance
    assert spec.spec_hash() == parse_spec(normalise({**BASE})).spec_hash()


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ({"cronscaler": {"scaleJobs": [{"name": "a", "schedule": "0 9 * *", "targetSize": 1}]}},
         "cronscaler.scaleJobs[0].schedule", "five fields"),
        ({"cronscaler": {"scaleJobs": [{"name": "a", "schedule": "0 25 * * *", "targetSize": 1}]}},
         "cronscaler.scaleJobs[0].schedule", "not a cron expression"),
        ({"cronscaler": {"scaleJobs": [{"name": "a", "schedule": "0 9 * * *", "targetSize": 1,
                                        "timeZone": "Mars/Olympus"}]}},
         "cronscaler.scaleJobs[0].timeZone", "IANA"),
        ({"cronscaler": {"scaleJobs": []}}, "cronscaler.scaleJobs", "at least 1"),
        ({"cronscaler": {**DAY_NIGHT, "excludeDates": ["someday"]}},
         "cronscaler.excludeDates", "not a cron expression"),
        ({"cronscaler": {"scaleJobs": [{"name": "a", "schedule": "0 9 * * *", "targetSize": 1},
                                       {"name": "a", "schedule": "0 21 * * *", "targetSize": 2}]}},
         "cronscaler.scaleJobs", "a name of its own"),
        ({"cronscaler": {"ScaleJobs": [], "scaleJobs": []}}, "cronscaler.scaleJobs", "twice"),
        ({"autoscaler": {"min": 1, "max": 2, "strategies": {"qps": 1},
                         "scaleStrategies": [{"metricName": "qps", "threshold": 1}]}},
         "autoscaler.strategies", "once, in one form"),
        ({"cronscaler": DAY_NIGHT, "llm": {"engine": "vllm-cpu", "model": "m",
                                           "pd": {"prefill": {}, "decode": {}}}},
         "cronscaler", "each role on its own"),
    ],
)  # fmt: skip
def test_a_bad_cronscaler_is_refused_naming_the_field(extra, field, words):
    spec = {**BASE, **extra}
    if "llm" in extra:
        spec.pop("containers")
    errors = errors_of(spec)
    assert field in errors, errors
    assert words in " ".join(errors[field])
