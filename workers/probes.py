"""Health checks as a real orchestrator does them: pure transitions, and the probe itself.

Readiness decides routing: `success_threshold` passes in a row make an instance ready,
`failure_threshold` failures in a row take a ready one out of routing until it passes again.
A new instance that has not passed by its startup deadline has failed to start. Liveness
alone restarts a running engine: `failure_threshold` failures in a row.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.health import is_healthy

READY, STARTING, UNHEALTHY = "ready", "starting", "unhealthy"


@dataclass(frozen=True)
class Probe:
    """One check's settings, from the spec's health_check (or its liveness)."""

    path: str | None = None  # None: the engine's own health path
    initial_delay: float = 0
    period: float = 5
    timeout: float = 2
    failure_threshold: int = 3
    success_threshold: int = 1

    @classmethod
    def of(cls, check) -> Probe:
        """From a spec's health_check or health_check.liveness section (None: defaults)."""
        if check is None:
            return cls()
        return cls(
            path=check.path, initial_delay=check.initial_delay_seconds,
            period=check.period_seconds, timeout=check.timeout_seconds,
            failure_threshold=check.failure_threshold,
            success_threshold=getattr(check, "success_threshold", 1),
        )  # fmt: skip


@dataclass(frozen=True)
class Readiness:
    state: str
    successes: int = 0
    failures: int = 0
    event: str = ""  # "InstanceReady" | "InstanceUnhealthy" | "" when nothing changed state


def after_readiness(current: Readiness, passed: bool, probe: Probe) -> Readiness:
    """The instance's readiness after one probe."""
    if passed:
        successes = current.successes + 1
        if current.state != READY and successes >= probe.success_threshold:
            return Readiness(READY, successes, 0, "InstanceReady")
        return Readiness(current.state, successes, 0)
    failures = current.failures + 1
    if current.state == READY and failures >= probe.failure_threshold:
        return Readiness(UNHEALTHY, 0, failures, "InstanceUnhealthy")
    return Readiness(current.state, 0, failures)


def due(last: float | None, started: float, now: float, probe: Probe) -> bool:
    """Whether a check is due: past its initial delay and a period since the last one."""
    if now - started < probe.initial_delay:
        return False
    return last is None or now - last >= probe.period


def check(url: str, default_path: str, probe: Probe, key: str = "") -> bool:
    return is_healthy(url, probe.path or default_path, timeout=probe.timeout, key=key)
