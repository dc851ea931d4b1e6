"""EAS's scheduled scaling, `cronscaler`: at each time a job's cron schedule names (in its time
zone), the service's instance count becomes the job's target, until the next job fires.

    "cronscaler": {"scaleJobs": [{"name": "day", "schedule": "0 9 * * 1-5",
                                  "targetSize": 8, "timeZone": "Asia/Shanghai"},
                                 {"name": "night", "schedule": "0 21 * * *", "targetSize": 1}],
                   "excludeDates": ["* * 1 1 *"]}

EAS's API spells these in PascalCase (ScaleJobs, Name, Schedule, TargetSize, TimeZone,
ExcludeDates); a service JSON may too (contracts.eas.spellings makes them these). A fire time
that an `excludeDates` cron expression matches (in the job's time zone) does not count.

With an `autoscaler`, the latest target is the autoscaler's floor until the next job fires
(within its min..max: the autoscaler's bounds still hold); without one, it is the count. Once
stored, the latest fire before now applies at once, so a service is where its schedule says.
Pure: `latest_fire` is what workers.scaling.autoscaling applies on each pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter
from pydantic import Field, field_validator

from contracts.spec_fleet import MAX_INSTANCES, _Strict

# How far back a fire is looked for: a job that has not fired within it (or only on excluded
# dates) does not count yet.
LOOKBACK = timedelta(days=400)
# Fire times examined per job and pass: bounds the work of a schedule excluded most of the time.
MAX_STEPS = 1000


def _cron(value: str) -> str:
    if len(value.split()) != 5 or not croniter.is_valid(value):
        raise ValueError(
            f"{value!r} is not a cron expression of five fields (minute hour day month weekday)"
        )
    return value


class ScaleJob(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    schedule: str = Field(
        max_length=128, description="Cron, five fields (minute hour day month weekday)."
    )
    targetSize: int = Field(  # noqa: N815 (EAS spelling)
        ge=0, le=MAX_INSTANCES, description="Instances from this job's fire to the next job's."
    )
    timeZone: str = Field(  # noqa: N815 (EAS spelling)
        default="UTC", max_length=64, description="An IANA time zone, e.g. Asia/Shanghai."
    )

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str) -> str:
        return _cron(value)

    @field_validator("timeZone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone (e.g. Asia/Shanghai)") from None
        return value


class Cronscaler(_Strict):
    """Scheduled scaling: each job sets the count at its schedule's times."""

    scaleJobs: list[ScaleJob] = Field(min_length=1, max_length=32)  # noqa: N815
    excludeDates: list[str] = Field(  # noqa: N815
        default=[], max_length=64,
        description="Cron expressions: a fire time one of them matches does not count.",
    )  # fmt: skip

    @field_validator("excludeDates")
    @classmethod
    def _excluded(cls, value: list[str]) -> list[str]:
        return [_cron(item) for item in value]

    @field_validator("scaleJobs")
    @classmethod
    def _names(cls, value: list[ScaleJob]) -> list[ScaleJob]:
        names = [job.name for job in value]
        if len(set(names)) != len(names):
            raise ValueError("give each job a name of its own")
        return value


class CronScaled(_Strict):
    """The service spec's `cronscaler`."""

    cronscaler: Cronscaler | None = Field(
        default=None,
        description="Scheduled scaling: at each job's cron times the count becomes its "
        "targetSize (with an autoscaler: its floor, within min..max).",
    )


@dataclass(frozen=True)
class Fire:
    """The job that fired last, and when (seconds since the epoch)."""

    at: float
    job: str
    target: int


def latest_fire(cron: Cronscaler, now: float) -> Fire | None:
    """The latest fire at or before `now` of any job, excluded dates left out; None when no
    job fired within LOOKBACK. Two jobs firing at once: the later one in the list wins."""
    best: Fire | None = None
    for job in cron.scaleJobs:
        at = _last_fire(job, cron.excludeDates, now)
        if at is not None and (best is None or at >= best.at):
            best = Fire(at, job.name, job.targetSize)
    return best


def _last_fire(job: ScaleJob, excluded: list[str], now: float) -> float | None:
    zone = ZoneInfo(job.timeZone)
    # croniter's get_prev is strictly before its start: a second past now counts now's minute.
    start = datetime.fromtimestamp(now + 1, tz=UTC).astimezone(zone)
    earliest = start - LOOKBACK
    times = croniter(job.schedule, start, max_years_between_matches=2)
    for _ in range(MAX_STEPS):
        try:
            fire = times.get_prev(datetime)
        except CroniterBadDateError:  # a date that never comes (30 February)
            return None
        if fire < earliest:
            return None
        if not any(croniter.match(rule, fire) for rule in excluded):
            return fire.timestamp()
    return None
