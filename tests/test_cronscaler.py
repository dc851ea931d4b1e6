"""EAS's scheduled scaling through the autoscaler's loop, the scheduler and node agents
(in-memory runtimes), the real database and Redis: a schedule sets the count at its times,
with an autoscaler it is the floor the load cannot take the count below, and it says so in
the service's events."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controlplane.services.models import Service
from tests.test_autoscaling import QPS, events, fleet, gateway, report  # noqa: F401 (fixtures)
from tests.test_fleet import custom, deploy
from workers.scaling.autoscaling import autoscale_all

pytestmark = pytest.mark.django_db
DAY_NIGHT = {"scaleJobs": [
    {"name": "day", "schedule": "0 9 * * *", "targetSize": 3},
    {"name": "night", "schedule": "0 21 * * *", "targetSize": 1},
]}  # fmt: skip


def at(text: str) -> float:
    return datetime.fromisoformat(f"2026-11-28 {text}").replace(tzinfo=UTC).timestamp()


def test_a_schedule_alone_sets_the_count_at_its_times(fleet, gateway):  # noqa: F811
    deploy(custom("shop", instances=2, cronscaler=DAY_NIGHT))
    fleet.settle()
    assert len(fleet.rows("shop")) == 2
    assert autoscale_all(gateway, now=at("10:00")) == {"shop"}  # day fired at 09:00: 3
    fleet.settle()
    assert [s for _, s in fleet.states("shop")] == ["ready"] * 3
    assert autoscale_all(gateway, now=at("15:00")) == set()  # nothing fired since
    assert autoscale_all(gateway, now=at("21:00")) == {"shop"}
    fleet.settle()
    assert len(fleet.rows("shop")) == 1
    assert events("shop") == [
        ("ScaledUp", "instances: 2 → 3: cronscaler job day → 3"),
        ("ScaledDown", "instances: 3 → 1: cronscaler job night → 1"),
    ]


def test_with_an_autoscaler_the_schedule_is_its_floor_within_its_bounds(fleet, gateway):  # noqa: F811
    autoscaler = {"min": 1, "max": 4, "scaleStrategies": QPS,
                  "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}}  # fmt: skip
    deploy(custom("web", cronscaler=DAY_NIGHT, autoscaler=autoscaler))
    fleet.settle()
    report(gateway, qps={})  # no load at all
    assert autoscale_all(gateway, now=at("10:00")) == {"web"}
    assert Service.objects.get(name="web").autoscale[""]["replicas"] == 3  # not min's 1
    assert autoscale_all(gateway, now=at("10:01")) == set()  # no load takes it below 3
    report(gateway, qps={"web": 12.0})  # 4 instances' worth: above the floor, up to max
    assert autoscale_all(gateway, now=at("10:02")) == {"web"}
    assert Service.objects.get(name="web").autoscale[""]["replicas"] == 4
    report(gateway, qps={})
    assert autoscale_all(gateway, now=at("21:00")) == {"web"}  # night: the floor is 1 again
    fleet.settle()
    assert len(fleet.rows("web")) == 1
    assert [reason for reason, _ in events("web")] == ["ScaledUp", "ScaledUp", "ScaledDown"]
