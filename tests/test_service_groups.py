"""Service groups' pure decisions (contracts.service_groups): whose turn, whose session,
which members count, and the snapshot's group entries."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from contracts.routing import Snapshot
from contracts.service_groups import (
    AUTO,
    CUSTOMIZED,
    GroupMember,
    RoutedGroup,
    SmoothRoundRobin,
    effective_weights,
    shares,
    sticky_choice,
)

A, B, C = GroupMember("a", 900), GroupMember("b", 100), GroupMember("c", 0)


@pytest.mark.parametrize(
    ("mode", "members", "ready", "expected"),
    [
        # customized: the weights, among members with a ready instance
        (CUSTOMIZED, [A, B], {"a": 1, "b": 3}, {"a": 900, "b": 100}),
        (CUSTOMIZED, [A, B], {"a": 0, "b": 3}, {"a": 0, "b": 100}),
        (CUSTOMIZED, [A, B, C], {"a": 1, "b": 1, "c": 5}, {"a": 900, "b": 100, "c": 0}),
        # auto: the ready instances, whatever the weights
        (AUTO, [A, B], {"a": 1, "b": 3}, {"a": 1, "b": 3}),
        (AUTO, [A, B, C], {"a": 2, "c": 2}, {"a": 2, "b": 0, "c": 2}),
        # nobody ready: the weights alone (auto: one each), the member answers as it would alone
        (CUSTOMIZED, [A, B], {}, {"a": 900, "b": 100}),
        (AUTO, [A, B], {"a": 0, "b": 0}, {"a": 1, "b": 1}),
        (CUSTOMIZED, [], {}, {}),
    ],
)
def test_effective_weights(mode, members, ready, expected):
    assert effective_weights(mode, members, ready) == expected


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        ({"a": 900, "b": 100}, {"a": 0.9, "b": 0.1}),
        ({"a": 0, "b": 5}, {"a": 0.0, "b": 1.0}),
        ({"a": 0, "b": 0}, {"a": 0.0, "b": 0.0}),
    ],
)
def test_shares(weights, expected):
    assert shares(weights) == pytest.approx(expected)


@pytest.mark.parametrize(
    "weights",
    [{"a": 900, "b": 100}, {"a": 1, "b": 1, "c": 1}, {"a": 7, "b": 0, "c": 3}, {"a": 1000}],
)
def test_smooth_round_robin_is_exact_over_every_full_cycle(weights):
    turns = SmoothRoundRobin()
    total = sum(weights.values())
    for _ in range(3):
        picked = Counter(turns.pick(weights) for _ in range(total))
        assert picked == Counter({k: v for k, v in weights.items() if v})


def test_smooth_round_robin_interleaves_rather_than_bursts():
    turns = SmoothRoundRobin()
    picks = [turns.pick({"a": 1, "b": 1}) for _ in range(6)]
    assert picks in (["a", "b"] * 3, ["b", "a"] * 3)


def test_smooth_round_robin_follows_changed_weights_at_once():
    turns = SmoothRoundRobin()
    for _ in range(7):
        turns.pick({"a": 100, "b": 100})
    assert {turns.pick({"a": 0, "b": 100}) for _ in range(50)} == {"b"}
    assert turns.pick({}) is None and turns.pick({"a": 0}) is None


def test_a_session_stays_on_one_member_while_the_weights_stand():
    weights = {"a": 900, "b": 100}
    for session in (f"s{i}" for i in range(200)):
        assert len({sticky_choice(session, weights) for _ in range(5)}) == 1


def test_sessions_spread_by_weight():
    picked = Counter(sticky_choice(f"user-{i}", {"a": 750, "b": 250}) for i in range(4000))
    assert picked["a"] / 4000 == pytest.approx(0.75, abs=0.03)


def test_a_weight_change_moves_only_the_sessions_it_must():
    before = {f"s{i}": sticky_choice(f"s{i}", {"a": 500, "b": 500}) for i in range(2000)}
    after = {s: sticky_choice(s, {"a": 500, "b": 500, "c": 500}) for s in before}
    moved = [s for s in before if before[s] != after[s]]
    assert all(after[s] == "c" for s in moved)  # only to the newcomer, never between a and b
    assert len(moved) / 2000 == pytest.approx(1 / 3, abs=0.05)


def test_no_member_with_weight_means_no_session_member():
    assert sticky_choice("s", {"a": 0}) is None and sticky_choice("s", {}) is None


def test_groups_round_trip_through_the_snapshot():
    group = RoutedGroup("g", CUSTOMIZED, (A, B), ("x-session-id", "x-user"))
    again = Snapshot.from_json(Snapshot(version=3, groups={"g": group}).to_json())
    assert again.groups == {"g": group} and again.unreadable == ()


@pytest.mark.parametrize(
    "entry",
    [
        {"mode": "random"},
        {"members": [{"service": "a", "weight": 1001}]},
        {"members": [{"service": "a", "weight": True}]},
        {"members": [{"weight": 1}]},
        {"session_headers": "x-session-id"},
    ],
)
def test_a_group_entry_of_the_wrong_shape_is_left_out_alone(entry):
    good = RoutedGroup("ok", AUTO, (A,), ())
    text = json.loads(Snapshot(version=1, groups={"ok": good}).to_json())
    text["groups"]["bad"] = entry
    read = Snapshot.from_json(json.dumps(text))
    assert read.groups == {"ok": good} and read.unreadable == ("group bad",)
