"""The rollout planner, table-driven: new instances first, old ones drained only while enough
stay ready, a failing new version pauses the rollout."""

from __future__ import annotations

import pytest

from workers.scheduling.rollout import Member, Step, step


def members(text: str) -> list[Member]:
    """`a:new:ready b:old:starting c:new:backoff!` — name, spec, state; `!` marks it failing,
    `*` marks it on a draining node."""
    out = []
    for item in text.split():
        name, spec, state = item.rstrip("!*").split(":")
        out.append(Member(name, spec, state, movable=item.endswith("*"),
                          failing="exited with code 1" if item.endswith("!") else ""))  # fmt: skip
    return out


CASES = [
    # id, replicas, surge, unavailable, members, expected step
    ("first deploy", 2, 1, 0, "", Step(create=2)),
    ("steady", 2, 1, 0, "a:new:ready b:new:ready", Step()),
    ("scale up", 3, 1, 0, "a:new:ready", Step(create=2)),
    ("scale down keeps the ready", 1, 1, 0, "a:new:starting b:new:ready", Step(drain=("a",))),
    ("stop drains all", 0, 1, 0, "a:new:ready b:old:ready", Step(drain=("a", "b"))),
    ("update starts with a surge", 2, 1, 0, "a:old:ready b:old:ready", Step(create=1)),
    ("update waits for the new one", 2, 1, 0, "a:old:ready b:old:ready n:new:starting", Step()),
    ("a ready new one frees an old", 2, 1, 0, "a:old:ready b:old:ready n:new:ready",
     Step(drain=("a",))),
    ("then the next new one", 2, 1, 0, "b:old:ready n:new:ready", Step(create=1)),
    ("last old goes", 2, 1, 0, "b:old:ready n:new:ready m:new:ready", Step(drain=("b",))),
    ("draining ones count for nothing", 2, 1, 0, "a:old:draining n:new:ready", Step(create=1)),
    ("surge 2", 2, 2, 0, "a:old:ready b:old:ready", Step(create=2)),
    ("unavailable 1, no surge", 2, 0, 1, "a:old:ready b:old:ready", Step(drain=("a",))),
    ("then create into the gap", 2, 0, 1, "b:old:ready", Step(create=1)),
    ("old not serving goes at once", 2, 1, 0, "a:old:backoff b:old:ready",
     Step(create=2, drain=("a",))),
    ("failing new pauses, old keeps serving", 2, 1, 0, "a:old:ready b:old:ready n:new:backoff!",
     Step(paused="n: exited with code 1")),
    ("paused with unavailable 1 drains nothing", 2, 1, 1,
     "a:old:ready b:old:ready n:new:backoff!", Step(paused="n: exited with code 1")),
    ("a recovered new one resumes", 2, 1, 0, "a:old:ready b:old:ready n:new:ready",
     Step(drain=("a",))),
    ("failing without a rollout is no pause", 2, 1, 0, "n:new:backoff! m:new:ready", Step()),
    ("a draining node's instance is replaced first", 1, 1, 0, "a:new:ready*", Step(create=1)),
    ("and drained once the replacement is ready", 1, 1, 0, "a:new:ready* n:new:ready",
     Step(drain=("a",))),
    ("unknown (dead node) counts as not ready", 1, 1, 0, "a:new:unknown", Step()),
    ("a failed leftover of an earlier update is cleaned up", 1, 1, 0,
     "a:mid:backoff! b:old:ready", Step(create=1, drain=("a",))),
]  # fmt: skip


@pytest.mark.parametrize(("replicas", "surge", "unavailable", "text", "expected"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])  # fmt: skip
def test_step(replicas, surge, unavailable, text, expected):
    assert step(replicas, "new", members(text), surge, unavailable) == expected


def test_a_whole_update_never_drops_below_the_replica_count():
    """Drive a 3-replica update to its end: ready instances never fall below 3 and never
    exceed 3 + surge in all."""
    replicas, surge = 3, 1
    fleet = {f"o{i}": Member(f"o{i}", "old", "ready") for i in range(replicas)}
    for turn in range(20):
        result = step(replicas, "new", list(fleet.values()), surge, 0)
        for name in result.drain:
            del fleet[name]
        for i in range(result.create):
            fleet[f"n{turn}-{i}"] = Member(f"n{turn}-{i}", "new", "starting")
        assert sum(m.ready for m in fleet.values()) >= replicas
        assert len(fleet) <= replicas + surge
        # every starting instance becomes ready before the next step
        fleet = {n: Member(n, m.spec_hash, "ready") for n, m in fleet.items()}
    assert {m.spec_hash for m in fleet.values()} == {"new"} and len(fleet) == replicas
