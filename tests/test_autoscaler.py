"""The autoscaler's decisions as a pure function: EAS's formula, its tolerance, the
stabilization windows, scale to zero and waking, and the reasons it gives."""

from __future__ import annotations

import pytest

from contracts.spec_scaling import Autoscaler
from workers.scaling.autoscaler import Signals, State, decide


def scaler(min_=1, max_=8, up=0, down=300, grace=600, **thresholds) -> Autoscaler:
    strategies = [{"metricName": m, "threshold": t} for m, t in (thresholds or {"qps": 10}).items()]
    return Autoscaler.model_validate({
        "min": min_, "max": max_, "scaleStrategies": strategies,
        "behavior": {"scaleUp": {"stabilizationWindowSeconds": up},
                     "scaleDown": {"stabilizationWindowSeconds": down},
                     "onZero": {"scaleDownGracePeriodSeconds": grace}},
    })  # fmt: skip


@pytest.mark.parametrize(
    ("replicas", "signals", "count", "words"),
    [
        # EAS's example: 2 ready at 23 qps each against 10 → ceil(2 × 2.3) = 5
        (2, Signals(ready=2, qps=46.0), 5, "qps 23.00/instance against 10 over 2 ready → 5"),
        # within the 10% tolerance: no change
        (2, Signals(ready=2, qps=21.8), 2, ""),
        (2, Signals(ready=2, qps=18.2), 2, ""),
        # concurrency, queue (engine waiting) and KV usage, per ready instance
        (1, Signals(ready=1, qps=1.0, in_flight=9), 3, "concurrency 9.00/instance"),
        (1, Signals(ready=1, queue=6.0), 3, "queue 6.00/instance"),
        (2, Signals(ready=2, kv_cache=0.9), 3, "kv_cache 90.00%"),
        # the largest of several strategies wins
        (1, Signals(ready=1, qps=25.0, in_flight=12), 4, "concurrency 12.00/instance"),
        # bounded by max
        (2, Signals(ready=2, qps=1000.0), 8, "→ 100"),
        # no figures at all: nothing changes
        (3, Signals(ready=0), 3, ""),
    ],
)
def test_the_recommendation_follows_the_strongest_signal(replicas, signals, count, words):
    rules = scaler(qps=10, concurrency=3, queue=2, kv_cache=60)
    decision = decide(rules, State(replicas=replicas, last_traffic=0.0), signals, now=100.0)
    assert decision.replicas == count
    assert words in decision.reason
    assert (decision.reason == "") == (count == replicas)


def test_a_scale_down_waits_for_the_whole_window_and_never_flaps():
    rules = scaler(down=60)
    state = State(replicas=4, last_traffic=0.0)
    seen = []
    # 40 qps (4 instances' worth) for a minute, then a dip to 10 qps (1 instance) that lasts
    for t in range(0, 200, 5):
        qps = 40.0 if t < 60 else 10.0
        decision = decide(rules, state, Signals(ready=state.replicas, qps=qps), now=float(t))
        state = decision.state
        seen.append((t, decision.replicas))
    counts = [n for _, n in seen]
    assert counts[:24] == [4] * 24  # 40 qps until 55 s, then the window holds 4 until 115 s
    assert counts[24:] == [1] * (len(counts) - 24)  # down once, and it stays down
    # history older than the longest window is dropped
    assert min(t for t, _ in state.recommendations) >= 195 - 60


def test_a_short_dip_inside_the_window_removes_nothing():
    rules = scaler(down=30)
    state = State(replicas=3, last_traffic=0.0)
    for t, qps in [(0, 30.0), (5, 5.0), (10, 5.0), (15, 30.0), (20, 5.0), (25, 30.0)]:
        decision = decide(rules, state, Signals(ready=3, qps=qps), now=float(t))
        state = decision.state
        assert decision.replicas == 3


def test_a_scale_up_window_waits_for_the_load_to_last():
    rules = scaler(up=10)
    state = State(replicas=1, last_traffic=0.0)
    counts = []
    for t in (0, 5, 10, 15):
        qps = 5.0 if t == 0 else 30.0
        decision = decide(rules, state, Signals(ready=1, qps=qps), now=100.0 + t)
        state = decision.state
        counts.append(decision.replicas)
    assert counts == [1, 1, 1, 3]  # the 5 qps at 100 s caps it until it leaves the window
    assert "scale-up window" not in decision.reason


def test_an_idle_service_with_min_zero_stops_after_the_grace_and_wakes_on_a_held_request():
    rules = scaler(min_=0, down=0, grace=30)
    state = State(replicas=1, last_traffic=0.0)
    decision = decide(rules, state, Signals(ready=1, qps=0.0), now=29.0)
    assert decision.replicas == 1  # not yet: 29 s without a request
    decision = decide(rules, decision.state, Signals(ready=1, qps=0.0), now=30.0)
    assert (decision.replicas, decision.reason) == (0, "no request for 30 s (onZero grace 30 s)")
    decision = decide(rules, decision.state, Signals(ready=0), now=500.0)
    assert (decision.replicas, decision.reason) == (0, "")  # stays at zero, silently
    decision = decide(rules, decision.state, Signals(ready=0, held=3), now=501.0)
    assert decision.replicas == 1
    assert decision.reason == "3 request(s) held while no instance runs; waking"
    assert decision.state.last_traffic == 501.0


def test_an_async_service_stays_up_while_its_queue_holds_items_and_wakes_for_one():
    rules = scaler(min_=0, down=0, grace=30)
    state = State(replicas=1, last_traffic=0.0)
    # No request through the gateways, but items wait in its queue: not idle.
    decision = decide(rules, state, Signals(ready=1, qps=0.0, queue=4.0, backlog=4), now=100.0)
    assert decision.replicas == 1 and decision.state.last_traffic == 100.0
    decision = decide(rules, decision.state, Signals(ready=1, queue=0.0), now=130.0)
    assert decision.replicas == 0  # the queue emptied 30 s ago
    decision = decide(rules, decision.state, Signals(ready=0, queue=1.0, backlog=1), now=131.0)
    assert (decision.replicas, decision.reason) == (
        1,
        "1 item(s) in its queue while no instance runs; waking",
    )


def test_min_one_never_goes_to_zero_and_traffic_resets_the_idle_clock():
    rules = scaler(min_=1, down=0, grace=0)
    decision = decide(rules, State(replicas=2, last_traffic=0.0), Signals(ready=2, qps=0.0), 99.0)
    assert decision.replicas == 1
    rules = scaler(min_=0, down=0, grace=30)
    state = State(replicas=1, last_traffic=0.0)
    decision = decide(rules, state, Signals(ready=1, in_flight=1), now=25.0)
    decision = decide(rules, decision.state, Signals(ready=1, qps=0.0), now=50.0)
    assert decision.replicas == 1  # 25 s since the last request
    decision = decide(rules, decision.state, Signals(ready=1, qps=0.0), now=55.0)
    assert decision.replicas == 0


@pytest.mark.parametrize(
    "data", [None, {}, {"replicas": "x"}, {"replicas": 1, "recommendations": [[1]]}, []]
)
def test_unreadable_state_starts_afresh(data):
    state = State.from_json(data, default=2, now=7.0)
    assert state == State(replicas=2, last_traffic=7.0)


def test_state_round_trips():
    state = State(replicas=3, recommendations=((1.0, 2), (2.5, 3)), last_traffic=2.5)
    assert State.from_json(state.to_json(), default=1, now=0.0) == state
