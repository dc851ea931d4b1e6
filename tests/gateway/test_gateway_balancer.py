"""The balancer alone: least in-flight requests first, ties in turn."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from contracts.routing import RoutedInstance
from gateway.routing.balancer import Balancer

A = RoutedInstance("a", "http://10.0.0.1:8000")
B = RoutedInstance("b", "http://10.0.0.2:8000")
C = RoutedInstance("c", "http://10.0.0.3:8000")


def test_rotates_between_idle_instances() -> None:
    balancer = Balancer()
    picks = Counter(balancer.pick("svc", [A, B, C]) for _ in range(9))
    assert picks == {A: 3, B: 3, C: 3}


def test_prefers_instance_with_fewest_requests_in_flight() -> None:
    balancer = Balancer()
    balancer.acquire(A.url)
    balancer.acquire(A.url)
    balancer.acquire(B.url)
    assert [balancer.pick("svc", [A, B, C]) for _ in range(3)] == [C, C, C]


def test_release_makes_instance_eligible_again() -> None:
    balancer = Balancer()
    balancer.acquire(A.url)
    assert balancer.pick("svc", [A, B]) == B
    balancer.release(A.url)
    assert balancer.in_flight(A.url) == 0
    assert {balancer.pick("svc", [A, B]) for _ in range(2)} == {A, B}


def test_skips_excluded_instances_and_reports_none_when_all_are() -> None:
    balancer = Balancer()
    assert balancer.pick("svc", [A, B], exclude={A.url}) == B
    assert balancer.pick("svc", [A, B], exclude={A.url, B.url}) is None
    assert balancer.pick("svc", []) is None


def test_cooling_instance_is_passed_over_until_its_cool_down_ends() -> None:
    balancer = Balancer(cooldown=0.05)
    balancer.cool_down(A.url)
    assert balancer.cooling(A.url)
    assert {balancer.pick("svc", [A, B]) for _ in range(4)} == {B}
    # Even with more requests in flight, a healthy instance goes before a cooling one.
    balancer.acquire(B.url)
    assert balancer.ranked("svc", [A, B]) == [B, A]
    time.sleep(0.06)
    assert not balancer.cooling(A.url)
    assert balancer.pick("svc", [A, B]) == A


def test_cooling_instances_are_still_tried_when_nothing_else_is_left() -> None:
    balancer = Balancer(cooldown=5)
    balancer.cool_down(A.url)
    balancer.cool_down(B.url)
    assert {balancer.pick("svc", [A, B]) for _ in range(4)} == {A, B}


def test_quiet_for_is_the_time_since_the_last_call_to_any_of_the_instances_ended() -> None:
    balancer = Balancer()
    assert balancer.quiet_for(["http://a", "http://b"]) == float("inf")  # none yet
    balancer.acquire("http://a")
    balancer.release("http://a")
    time.sleep(0.05)
    balancer.acquire("http://b")
    balancer.release("http://b")
    assert balancer.quiet_for(["http://a", "http://b"]) < 0.04  # b's, the latest
    assert 0.05 <= balancer.quiet_for(["http://a"]) < 1
    assert balancer.quiet_for(["http://c"]) == float("inf")


def test_next_call_in_follows_the_pace_of_an_instances_calls_and_forgets_it_after_a_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    ended: list[str] = []
    balancer = Balancer()
    balancer.on_release = lambda: ended.append("nudge")

    def call_at(at: float) -> None:
        now[0] = at
        balancer.acquire("http://a")
        balancer.release("http://a")

    call_at(100.0)
    assert balancer.next_call_in("http://a") == float("inf")  # one call: no pace yet
    call_at(100.5)
    assert balancer.next_call_in("http://a") == pytest.approx(0.5)
    now[0] = 100.8
    assert balancer.next_call_in("http://a") == pytest.approx(0.2)
    call_at(101.5)  # a gap of 1.0 moves the pace by 0.3 of the difference: 0.65
    assert balancer.next_call_in("http://a") == pytest.approx(0.65)
    now[0] = 103.0
    assert balancer.next_call_in("http://a") == 0.0  # late: due now
    call_at(104.0)  # 2.5 s since the last: a new run of calls, its pace unknown
    assert balancer.next_call_in("http://a") == float("inf")
    assert balancer.next_call_in("http://b") == float("inf")
    assert ended == ["nudge"] * 4  # each call's end tells the queue feeder
