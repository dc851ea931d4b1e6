"""Health checks as a real orchestrator does them: pure transitions, and the probe itself.

Readiness decides routing: `success_threshold` passes in a row make an instance ready,
`failure_threshold` failures in a row take a ready one out of routing until it passes again.
A new instance that has not passed by its startup deadline has failed to start. Liveness
alone restarts a running engine: `failure_threshold` failures in a row. A startup probe
(EAS's containers[].startup_check) gates a starting instance: its readiness counts only once
the startup probe passes, and its liveness is not probed before it is ready.

Where the probes come from (probe_set): Wharf's top-level health_check, or EAS's container
probes (contracts.spec_probes); a spec gives one or the other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from urllib.parse import urlencode

from contracts.engine_front import PROBE_PATH
from workers.nodes.health import is_healthy

READY, STARTING, UNHEALTHY = "ready", "starting", "unhealthy"
# What a probe does: the engine's own health path (or its port, where it has none), an HTTP
# GET or a TCP connect of a port of the instance (through its front), a command in it.
ENGINE, HTTP, TCP, EXEC = "engine", "http", "tcp", "exec"


@dataclass(frozen=True)
class Probe:
    """One check's settings, from the spec's health_check (or its liveness), or a container
    probe of EAS's."""

    path: str | None = None  # None: the engine's own health path
    initial_delay: float = 0
    period: float = 5
    timeout: float = 2
    failure_threshold: int = 3
    success_threshold: int = 1
    kind: str = ENGINE
    port: int | None = None  # HTTP, TCP: the port the spec names
    command: tuple[str, ...] = ()  # EXEC
    # How often a new instance is checked until it first passes (None: every `period`).
    starting_period: float | None = None

    @classmethod
    def of(cls, check) -> Probe:
        """From a spec's health_check or health_check.liveness section (None: defaults)."""
        if check is None:
            return ENGINE_READINESS
        return cls(
            path=check.path, initial_delay=check.initial_delay_seconds,
            period=check.period_seconds, timeout=check.timeout_seconds,
            failure_threshold=check.failure_threshold,
            success_threshold=getattr(check, "success_threshold", 1),
        )  # fmt: skip

    @classmethod
    def of_container(cls, probe) -> Probe:
        """From one of EAS's container probes (contracts.spec_probes.ContainerProbe)."""
        timing = cls(
            initial_delay=probe.initial_delay_seconds, period=probe.period_seconds,
            timeout=probe.timeout_seconds, failure_threshold=probe.failure_threshold,
            success_threshold=probe.success_threshold,
        )  # fmt: skip
        if probe.http_get is not None:
            return replace(timing, kind=HTTP, path=probe.http_get.path, port=probe.http_get.port)
        if probe.tcp_socket is not None:
            return replace(timing, kind=TCP, port=probe.tcp_socket.port)
        return replace(timing, kind=EXEC, command=tuple(probe.exec.command))


# The readiness check of a spec that gives none: the engine's own health path every 5 s, and
# every second while a new instance starts (its node's agent comes back for it: RECHECK), so
# that it is routed as soon as it answers rather than up to a period later.
ENGINE_READINESS = Probe(starting_period=1.0)


@dataclass(frozen=True)
class ProbeSet:
    """How an instance of a spec is probed."""

    readiness: Probe
    liveness: Probe | None = None
    startup: Probe | None = None
    startup_deadline: float | None = None  # seconds after start; None: the fleet's default


def probe_set(spec) -> ProbeSet:
    """The probes of an instance of `spec` (None: the defaults): EAS's container probes where
    the spec has them, else Wharf's health_check."""
    container = spec.containers[0] if spec is not None and spec.containers else None
    if container is not None and container.probes():
        startup = container.startup_check
        deadline = None
        if startup is not None:  # Kubernetes' budget: the delay, then every allowed failure
            deadline = float(startup.initial_delay_seconds
                             + startup.period_seconds * startup.failure_threshold)  # fmt: skip
        ready = container.readiness()
        return ProbeSet(
            readiness=Probe.of_container(ready) if ready else ENGINE_READINESS,
            liveness=Probe.of_container(container.liveness_check)
            if container.liveness_check else None,
            startup=Probe.of_container(startup) if startup else None,
            startup_deadline=deadline,
        )  # fmt: skip
    hc = getattr(spec, "health_check", None) if spec is not None else None
    given = spec is not None and "health_check" in spec.model_fields_set
    return ProbeSet(
        readiness=Probe.of(hc) if given else ENGINE_READINESS,
        liveness=Probe.of(hc.liveness) if hc and hc.liveness else None,
        startup_deadline=getattr(hc, "startup_timeout_seconds", None),
    )


def request_path(probe: Probe, fronted: bool) -> str | None:
    """The path a network probe asks at the instance's url: its front's probe door with the
    port (and path) the spec names; with no front (host network, a prefill/decode member),
    the served port itself: the path (HTTP), or "" (TCP, a connect). None for others."""
    if probe.kind not in (HTTP, TCP):
        return None
    if not fronted:
        return probe.path or "" if probe.kind == HTTP else ""
    query: dict = {"port": probe.port, "timeout": probe.timeout}
    if probe.kind == HTTP:
        query["path"] = probe.path
    return f"{PROBE_PATH}?{urlencode(query)}"


# When each instance's readiness and liveness checks last ran, kept by its node's agent:
# (kind, instance, its engine's start) -> seconds since the epoch.
ProbeClock = dict[tuple[str, str, float], float]


@dataclass(frozen=True)
class Readiness:
    state: str
    successes: int = 0
    failures: int = 0
    event: str = ""  # "InstanceReady" | "InstanceUnhealthy" | "" when nothing changed state


def after_readiness(current: Readiness, passed: bool, probe: Probe) -> Readiness:
    """The instance's readiness after one probe. The counts stop at their thresholds, so a
    probe that changes nothing (a ready instance passing again) gives the same readiness, and
    the agent writes nothing for it."""
    if passed:
        successes = min(current.successes + 1, probe.success_threshold)
        if current.state != READY and successes >= probe.success_threshold:
            return Readiness(READY, successes, 0, "InstanceReady")
        return Readiness(current.state, successes, 0)
    failures = min(current.failures + 1, probe.failure_threshold)
    if current.state == READY and failures >= probe.failure_threshold:
        return Readiness(UNHEALTHY, 0, failures, "InstanceUnhealthy")
    return Readiness(current.state, 0, failures)


def due(last: float | None, started: float, now: float, probe: Probe, starting: bool = False
        ) -> bool:  # fmt: skip
    """Whether a check is due: past its initial delay and a period since the last one (its
    starting period, if it has one, while the instance has not passed yet)."""
    return now >= due_at(last, started, probe, starting)


def due_at(last: float | None, started: float, probe: Probe, starting: bool = False) -> float:
    """When a check falls due (seconds since the epoch): see `due`."""
    after_delay = started + probe.initial_delay
    if last is None:
        return after_delay
    period = probe.starting_period if starting and probe.starting_period else probe.period
    return max(after_delay, last + period)


# The clock's entry for when a starting instance's next readiness check falls due where that
# is sooner than its agent's next pass: the agent comes back for it, so that an engine that
# answers is routed within its starting period, not within the agent's interval.
RECHECK = ("recheck", "", 0.0)


def recheck(clock: ProbeClock, due_at: Iterable[float]) -> None:
    """The soonest of `due_at` (checks of instances still starting) as the clock's RECHECK,
    unless it has a sooner one."""
    soonest = min(due_at, default=math.inf)
    if soonest < clock.get(RECHECK, math.inf):
        clock[RECHECK] = soonest


def first_check_at(spec, started: float) -> float:
    """When an engine started at `started` is first worth checking: a starting period on, or
    its initial delay if longer (none can answer at once); never, with no starting period."""
    found = probe_set(spec)
    probe = found.startup or found.readiness
    if not probe.starting_period:
        return math.inf
    return started + max(probe.initial_delay, probe.starting_period)


def next_pass_in(clock: ProbeClock, now: float, interval: float) -> float:
    """How long a node's agent waits for its next pass (unless woken): its interval, or less
    where a starting instance's check (RECHECK) falls due sooner."""
    return max(0.0, min(interval, clock.get(RECHECK, math.inf) - now))


def check(url: str, default_path: str, probe: Probe, key: str = "") -> bool:
    """A network probe of an instance at `url` (its front's, where it has one); `probe.path`
    is the path asked (request_path), or None for the engine's own `default_path`."""
    if probe.kind == ENGINE:
        return is_healthy(url, probe.path or default_path, timeout=probe.timeout, key=key)
    # The front probes within probe.timeout; a second more for its own answer.
    return is_healthy(url, probe.path or "", timeout=probe.timeout + 1, key=key)
