"""The arithmetic of the figures, pure: percentiles, latencies from timestamps, and one line
per fleet size with each figure beside its target (issue 31)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


def percentile(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def since_create(
    created: Mapping[str, float],
    events: Mapping[str, float],
    service_of: Mapping[str, str],
    minus: float = 0.0,
) -> list[float]:
    """Seconds from each instance's service create to its event, less `minus` (the simulated
    engine start); instances of services this run did not create are left out."""
    return [events[name] - created[service_of[name]] - minus
            for name in events if service_of.get(name) in created]  # fmt: skip


def after_ready(routed: Mapping[str, float], ready_since: Mapping[str, float],
                offset: float) -> list[float]:  # fmt: skip
    """Seconds from each instance's readiness (its row's `ready_since`, the wall clock) to
    the gateway first serving a version that routes it (`routed`, the monotonic clock; `offset`
    is the wall clock less the monotonic one)."""
    return [at + offset - ready_since[name] for name, at in routed.items() if name in ready_since]


def first_at_or_after(loaded: Mapping[int, float], first: Mapping[str, int]) -> dict[str, float]:
    """For each instance first routed in snapshot version v: the earliest time a version >= v
    was served (a gateway may skip versions: it loads the newest)."""
    versions = sorted(loaded)
    earliest = [0.0] * len(versions)  # earliest[i]: min of loaded[v] over versions[i:]
    best = math.inf
    for i in range(len(versions) - 1, -1, -1):
        best = min(best, loaded[versions[i]])
        earliest[i] = best
    out = {}
    for name, version in first.items():
        lo, hi = 0, len(versions)
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if versions[mid] < version else (lo, mid)
        if lo < len(versions):
            out[name] = earliest[lo]
    return out


@dataclass(frozen=True)
class Target:
    """A figure's name, unit, limit and whether lower is better (all of them here)."""

    key: str
    heading: str
    limit: float | None  # None: reported, no target of its own

    def met(self, value: float) -> bool | None:
        if self.limit is None or math.isnan(value):
            return None
        return value <= self.limit


@dataclass
class SizeFigures:
    nodes: int
    instances: int
    values: dict[str, float] = field(default_factory=dict)
    routed: int = 0  # instances the gateway routed after the burst
    killed: list[str] = field(default_factory=list)  # the nodes killed at once
    moved: int = 0  # the instances they held, placed elsewhere
    notes: list[str] = field(default_factory=list)


def targets(evict_within: float) -> list[Target]:
    """The issue's targets; the CPU one (under one core for the whole control plane at 500
    nodes) per 100 nodes is 0.2 cores."""
    return [
        Target("create_p99_ms", "create p99 ms", 250),
        Target("placed_p50_s", "placed p50 s", None),
        Target("placed_p99_s", "placed p99 s", 2),
        Target("routed_p50_s", "routed p50 s", None),
        Target("routed_p99_s", "routed p99 s", 3),
        Target("ready_routed_p50_s", "ready→routed p50 s", None),
        Target("ready_routed_p99_s", "ready→routed p99 s", None),
        Target("burst_s", "burst s", None),
        Target("burst_busy_pct", "burst: machine busy %", None),
        Target("burst_cp_cores", "burst: API+worker cores", None),
        Target("burst_pg_cores", "burst: PG cores", None),
        Target("burst_sim_cores", "burst: sim+gw cores", None),
        Target("cpu_per_100", "CPU cores/100n", 0.2),
        Target("pg_per_100", "PG xact/s/100n", None),
        Target("writes_per_100", "PG row writes/s/100n", None),
        Target("redis_per_100", "Redis cmd/s/100n", None),
        Target("sim_cores", "sim+gw cores", None),
        Target("services_p99_ms", "GET services p99 ms", 250),
        Target("nodes_p99_ms", "GET nodes p99 ms", 250),
        Target("publish_ms", "publish ms", 100),
        Target("reload_ms", "gw reload ms", 100),
        Target("entry_ms", "entry publish ms", 100),
        Target("evicted_s", "10 killed: moved s", evict_within),
    ]


def cell(target: Target, value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    text = f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    met = target.met(value)
    return text if met is None else f"{text} {'ok' if met else 'MISS'}"


def table(lines: list[SizeFigures], evict_within: float) -> str:
    """One line per size, each figure beside its verdict; the targets in the heading."""
    heads = targets(evict_within)
    header = ["nodes", "instances"] + [
        t.heading + ("" if t.limit is None else f" (≤{t.limit:g})") for t in heads
    ]
    rows = [[str(f.nodes), str(f.instances)] + [cell(t, f.values.get(t.key)) for t in heads]
            for f in lines]  # fmt: skip
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out = [" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    out += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    notes = [f"{f.nodes} nodes: {note}" for f in lines for note in f.notes]
    return "\n".join(out + notes)
