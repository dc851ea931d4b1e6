"""Canary releases that judge themselves: the decision, pure.

A canary is a new version of a service started beside its stable one; its share of the
service's traffic goes up by steps (e.g. 10, 50, 100 %). Over each step's interval the
gateways measure both versions side by side (contracts.call_figures) and `judge` decides:

- a **breach** rolls the canary back at once: its error rate above `max_error_rate` (judged
  as soon as enough errors are in that the bound is broken whatever comes next, or over
  `min_requests` calls), or its TTFT or inter-token latency (p50 or p95) above `max_*_ratio`
  times the stable side's, once both sides have `min_requests` calls;
- within bounds, once the interval has passed and the canary has served `min_requests`
  calls: the next step, or, after the last step below 100 %, promotion (the stable side is
  drained);
- else it holds, saying what it waits for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

HOLD, ADVANCE, PROMOTE, ROLLBACK = "hold", "advance", "promote", "rollback"
CANARY_TRACK = "canary"  # an instance of a canary's version (contracts.routing's track)
# A canary's life: starting (its instances come up), running (judged step by step), paused
# (held where it is, by hand), then promoted, rolled back (a breach) or aborted (by hand).
STARTING, RUNNING, PAUSED = "starting", "running", "paused"
PROMOTED, ROLLED_BACK, ABORTED = "promoted", "rolled_back", "aborted"
ACTIVE = (STARTING, RUNNING, PAUSED)
STATES = (*ACTIVE, PROMOTED, ROLLED_BACK, ABORTED)


@dataclass(frozen=True)
class Bounds:
    max_error_rate: float = 0.01
    max_ttft_ratio: float = 1.5
    max_itl_ratio: float = 1.3
    min_requests: int = 50


@dataclass(frozen=True)
class Verdict:
    action: str
    why: str


def _ratio_breaches(
    canary: Mapping[str, Any], stable: Mapping[str, Any], figure: str, bound: float
) -> list[str]:
    found = []
    for quantile in ("p50", "p95"):
        name = f"{figure}_{quantile}_ms"
        ours, theirs = canary.get(name), stable.get(name)
        if ours is None or theirs is None or theirs <= 0:
            continue
        if ours / theirs > bound:
            label = "TTFT" if figure == "ttft" else "inter-token latency"
            found.append(f"{label} {quantile} {ours} ms vs stable {theirs} ms "
                         f"({ours / theirs:.2f}× > {bound}×)")  # fmt: skip
    return found


def breaches(canary: Mapping[str, Any], stable: Mapping[str, Any], bounds: Bounds) -> list[str]:
    """What the canary's figures (Figures.summary()) break, against the stable side's."""
    found = []
    requests, errors = canary.get("requests") or 0, canary.get("errors") or 0
    allowed = bounds.max_error_rate * max(requests, bounds.min_requests)
    if errors > allowed:
        found.append(f"error rate {errors}/{requests} = {errors / max(requests, 1):.1%} > "
                     f"{bounds.max_error_rate:.1%}")  # fmt: skip
    if requests >= bounds.min_requests and (stable.get("requests") or 0) >= bounds.min_requests:
        found += _ratio_breaches(canary, stable, "ttft", bounds.max_ttft_ratio)
        found += _ratio_breaches(canary, stable, "itl", bounds.max_itl_ratio)
    return found


def judge(
    canary: Mapping[str, Any],
    stable: Mapping[str, Any],
    bounds: Bounds,
    elapsed_s: float,
    interval_s: float,
    steps: Sequence[int],
    step: int,
) -> Verdict:
    """What to do with a canary at `steps[step]` % whose step began `elapsed_s` ago."""
    broken = breaches(canary, stable, bounds)
    if broken:
        return Verdict(ROLLBACK, "; ".join(broken))
    if elapsed_s < interval_s:
        return Verdict(HOLD, f"measuring: {elapsed_s:.0f} of {interval_s:.0f} s")
    requests = canary.get("requests") or 0
    if requests < bounds.min_requests:
        return Verdict(HOLD, f"waiting for calls: {requests} of {bounds.min_requests}")
    summary = _summary(canary, stable)
    if step + 1 >= len(steps) or steps[step + 1] >= 100:
        return Verdict(PROMOTE, f"within bounds at {steps[step]}%: {summary}")
    return Verdict(ADVANCE, f"within bounds at {steps[step]}%: {summary}; "
                            f"next {steps[step + 1]}%")  # fmt: skip


def _summary(canary: Mapping[str, Any], stable: Mapping[str, Any]) -> str:
    def side(figures: Mapping[str, Any]) -> str:
        return (f"{figures.get('requests') or 0} calls, {figures.get('errors') or 0} errors, "
                f"TTFT p95 {figures.get('ttft_p95_ms')} ms, "
                f"ITL p95 {figures.get('itl_p95_ms')} ms")  # fmt: skip

    return f"canary {side(canary)}; stable {side(stable)}"


def check_steps(steps: Sequence[int]) -> str | None:
    """Why `steps` are not a canary's steps (None when they are): rising percentages from
    1 to 100, ending at 100."""
    if not steps or len(steps) > 10:
        return "from 1 to 10 steps"
    if any(not 1 <= s <= 100 for s in steps):
        return "each a percentage from 1 to 100"
    if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        return "rising, each above the one before"
    if steps[-1] != 100:
        return "the last one 100 (the canary then takes every call, and is promoted)"
    return None
