"""Call figures: what the gateways measure of each call, side by side per service and track,
so that two versions (a canary and its stable side) or a service and its mirror can be
compared on what matters for LLMs: errors, time to first token, inter-token latency.

The gateways count into fixed latency buckets (log-spaced, milliseconds) per 10-second slot;
every gateway's counts add up in one Redis hash per (service, track, slot), and a reader sums
the slots of an interval and reads percentiles from the buckets (the bucket's upper bound:
an estimate never below the true value by more than one bucket).

Redis layout: hash ``wharf:figures:<service>:<track>:<slot>`` (slot = epoch seconds // 10),
fields ``requests``, ``errors``, ``ttft:<i>`` and ``itl:<i>`` (bucket i), expiring after
``RETAIN_S``. Track "" is a service's own calls; "mirror" the copies mirrored to it.
No Django and no Redis client here: the callers hand theirs.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

PREFIX = "wharf:figures:"
SLOT_S = 10
RETAIN_S = 3600
MIRROR = "mirror"  # the track of calls mirrored to a service (contracts.routing mirror)
# Upper bounds of the buckets, ms, about 1.25x apart (a ratio between two versions reads to
# within one step); the last catches everything slower.
BOUNDS_MS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 120, 150, 200,
             250, 300, 400, 500, 600, 800, 1000, 1200, 1500, 2000, 2500, 3000, 4000, 5000, 6000,
             8000, 10000, 12000, 15000, 20000, 30000, 60000, 120000, 600000)  # fmt: skip


def bucket(ms: float) -> int:
    """The bucket a latency of `ms` falls in."""
    return min(bisect.bisect_left(BOUNDS_MS, ms), len(BOUNDS_MS) - 1)


def slot(now: float) -> int:
    return int(now // SLOT_S)


def key(service: str, track: str, at_slot: int) -> str:
    return f"{PREFIX}{service}:{track}:{at_slot}"


def is_error(status: int, broken: bool) -> bool:
    """A call that counts against its version: a 5xx, or a stream cut short."""
    return broken or status >= 500


@dataclass
class Figures:
    """Counts for one (service, track) over some slots."""

    requests: int = 0
    errors: int = 0
    ttft: list[int] = field(default_factory=lambda: [0] * len(BOUNDS_MS))
    itl: list[int] = field(default_factory=lambda: [0] * len(BOUNDS_MS))

    def add(self, status: int, broken: bool, ttft_ms: float | None, itl_ms: float | None) -> None:
        self.requests += 1
        self.errors += is_error(status, broken)
        if ttft_ms is not None:
            self.ttft[bucket(ttft_ms)] += 1
        if itl_ms is not None:
            self.itl[bucket(itl_ms)] += 1

    def merge(self, other: Figures) -> None:
        self.requests += other.requests
        self.errors += other.errors
        self.ttft = [a + b for a, b in zip(self.ttft, other.ttft, strict=True)]
        self.itl = [a + b for a, b in zip(self.itl, other.itl, strict=True)]

    def fields(self) -> dict[str, int]:
        """The hash fields to add to Redis (zero counts left out)."""
        out = {"requests": self.requests, "errors": self.errors}
        out |= {f"ttft:{i}": n for i, n in enumerate(self.ttft) if n}
        out |= {f"itl:{i}": n for i, n in enumerate(self.itl) if n}
        return {name: n for name, n in out.items() if n}

    @classmethod
    def from_hashes(cls, hashes: Iterable[Mapping[str | bytes, str | bytes]]) -> Figures:
        """The sum of several slots' hashes as Redis returns them; unknown fields ignored."""
        total = cls()
        for found in hashes:
            for raw_name, raw_value in found.items():
                name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
                try:
                    value = int(raw_value)
                except (TypeError, ValueError):
                    continue
                kind, _, index = name.partition(":")
                if kind in ("requests", "errors") and not index:
                    setattr(total, kind, getattr(total, kind) + value)
                elif kind in ("ttft", "itl") and index.isdigit() and int(index) < len(BOUNDS_MS):
                    getattr(total, kind)[int(index)] += value
        return total

    def summary(self) -> dict[str, float | int | None]:
        return {
            "requests": self.requests,
            "errors": self.errors,
            "error_rate": round(self.errors / self.requests, 4) if self.requests else None,
            "ttft_p50_ms": percentile(self.ttft, 0.50),
            "ttft_p95_ms": percentile(self.ttft, 0.95),
            "itl_p50_ms": percentile(self.itl, 0.50),
            "itl_p95_ms": percentile(self.itl, 0.95),
        }


def percentile(counts: list[int], q: float) -> int | None:
    """The upper bound (ms) of the bucket holding the q-th quantile; None without samples."""
    total = sum(counts)
    if not total:
        return None
    rank, seen = q * total, 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= rank:
            return BOUNDS_MS[index]
    return BOUNDS_MS[-1]


def slots_between(since: float, until: float) -> range:
    return range(slot(since), slot(until) + 1)
