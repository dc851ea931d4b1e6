"""The canary's judgement (contracts.canary): breach, hold, advance, promote; table-driven."""

from __future__ import annotations

import pytest

from contracts.canary import ADVANCE, HOLD, PROMOTE, ROLLBACK, Bounds, check_steps, judge


def side(requests=100, errors=0, ttft=(100, 200), itl=(20, 30)) -> dict:
    return {"requests": requests, "errors": errors, "ttft_p50_ms": ttft[0],
            "ttft_p95_ms": ttft[1], "itl_p50_ms": itl[0], "itl_p95_ms": itl[1]}  # fmt: skip


STEPS = (10, 50, 100)
BOUNDS = Bounds(max_error_rate=0.01, max_ttft_ratio=1.5, max_itl_ratio=1.3, min_requests=50)


@pytest.mark.parametrize(
    ("canary", "stable", "elapsed", "step", "action", "words"),
    [
        # healthy, interval over, enough calls: next step; after the 50 % step: promote
        (side(), side(), 60, 0, ADVANCE, "next 50%"),
        (side(), side(), 60, 1, PROMOTE, "within bounds at 50%"),
        # healthy but too early, or too few calls yet
        (side(), side(), 30, 0, HOLD, "measuring: 30 of 60 s"),
        (side(requests=20), side(), 90, 0, HOLD, "waiting for calls: 20 of 50"),
        # errors: judged as soon as the bound is broken whatever comes next (1 % of 50 < 1)
        (side(requests=5, errors=1), side(), 5, 0, ROLLBACK, "error rate 1/5"),
        (side(requests=200, errors=2), side(), 60, 0, ADVANCE, "within bounds"),  # 1 %: not above
        (side(requests=200, errors=3), side(), 60, 0, ROLLBACK, "1.5% > 1.0%"),
        # 3x slower to first token, at p50 and p95
        (side(ttft=(300, 600)), side(), 10, 0, ROLLBACK, "TTFT p50 300 ms vs stable 100 ms"),
        # slower between tokens at p95 only
        (side(itl=(20, 50)), side(), 10, 0, ROLLBACK, "inter-token latency p95 50 ms"),
        (side(ttft=(120, 250)), side(), 60, 0, ADVANCE, "within bounds"),  # 1.25x: within 1.5x
        # latency is compared only with enough calls on both sides
        (side(requests=30, ttft=(900, 900)), side(), 10, 0, HOLD, "measuring"),
        (side(ttft=(900, 900)), side(requests=10), 60, 0, ADVANCE, "next 50%"),
        # a side without figures of a kind (no streams: no ITL) is not compared on it
        (side(itl=(None, None)), side(), 60, 0, ADVANCE, "next"),
    ],
)
def test_judge(canary, stable, elapsed, step, action, words):
    verdict = judge(canary, stable, BOUNDS, elapsed, 60, STEPS, step)
    assert verdict.action == action and words in verdict.why, verdict


def test_a_single_step_canary_is_promoted_once_it_passes():
    assert judge(side(), side(requests=0), BOUNDS, 60, 60, (100,), 0).action == PROMOTE


def test_a_rollback_names_every_figure_that_failed():
    why = judge(side(errors=30, ttft=(300, 600), itl=(60, 90)), side(), BOUNDS, 0, 60,
                STEPS, 0).why  # fmt: skip
    assert why.count(";") == 4 and "error rate 30/100" in why and "ITL" not in why


@pytest.mark.parametrize(
    ("steps", "problem"),
    [((10, 50, 100), None), ((100,), None), ((), "from 1 to 10"), ((0, 100), "percentage"),
     ((50, 10, 100), "rising"), ((10, 50), "last one 100"), (tuple(range(1, 12)), "1 to 10")],
)  # fmt: skip
def test_steps(steps, problem):
    found = check_steps(steps)
    assert (found is None) if problem is None else (problem in found)
