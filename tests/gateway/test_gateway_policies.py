"""The routing policies (gateway.routing.policies) as pure functions, and the balancer holding their
state: tables of candidates, loads and keys, and the order each policy ranks them in."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from contracts.routing import RoutedInstance
from gateway.routing import policies
from gateway.routing.balancer import Balancer
from gateway.routing.policies import (
    BLOCK_CHARS,
    KV_CACHE_LOAD,
    LEAST_OUTSTANDING,
    MAX_BLOCKS,
    PREFIX_CACHE,
    ROUND_ROBIN,
    SESSION,
    EngineFigures,
    Load,
    PrefixTable,
    RoutingKey,
    prompt_blocks,
    rank,
    rendezvous_weight,
    within_bound,
)

A = RoutedInstance("a", "http://10.0.0.1:8000")
B = RoutedInstance("b", "http://10.0.0.2:8000")
C = RoutedInstance("c", "http://10.0.0.3:8000")
ABC = [A, B, C]


def names(ranked: list[RoutedInstance]) -> str:
    return "".join(i.name for i in ranked)


def load(
    in_flight: dict[RoutedInstance, int] | None = None,
    figures: dict[RoutedInstance, EngineFigures] | None = None,
    cooling: tuple[RoutedInstance, ...] = (),
) -> Load:
    return Load(
        {i.url: n for i, n in (in_flight or {}).items()},
        {i.url: f for i, f in (figures or {}).items()},
        frozenset(i.url for i in cooling),
    )


@pytest.mark.parametrize(
    ("policy", "state", "expected"),
    [
        pytest.param(LEAST_OUTSTANDING, {}, "abc", id="idle-keeps-rotation"),
        pytest.param(LEAST_OUTSTANDING, {"in_flight": {A: 2, B: 1}}, "cba", id="fewest-first"),
        pytest.param(LEAST_OUTSTANDING, {"in_flight": {A: 1, C: 1}}, "bac", id="ties-in-turn"),
        pytest.param(
            LEAST_OUTSTANDING, {"in_flight": {B: 3}, "cooling": (A,)}, "cba", id="cooling-last"
        ),
        pytest.param(ROUND_ROBIN, {"in_flight": {A: 5}}, "abc", id="rr-ignores-load"),
        pytest.param(ROUND_ROBIN, {"cooling": (A,)}, "bca", id="rr-cooling-last"),
        pytest.param("no_such_policy", {"in_flight": {A: 1}}, "bca", id="unknown-is-least"),
    ],
)
def test_least_outstanding_and_round_robin(
    policy: str, state: dict[str, Any], expected: str
) -> None:
    assert names(rank(policy, ABC, load(**state))) == expected


# kv_cache_load: score = in flight + waiting + 2 x KV usage; no figures: in flight alone.
@pytest.mark.parametrize(
    ("state", "expected"),
    [
        pytest.param({}, "abc", id="idle-no-figures-keeps-rotation"),
        pytest.param(
            {"figures": {A: EngineFigures(waiting=3), B: EngineFigures(waiting=1)}},
            "cba",
            id="fewest-waiting-first",
        ),
        pytest.param(
            {
                "figures": {
                    A: EngineFigures(kv_cache=0.9),
                    B: EngineFigures(kv_cache=0.2),
                    C: EngineFigures(kv_cache=0.5),
                }
            },  # fmt: skip
            "bca",
            id="equal-queues-least-kv-first",
        ),
        pytest.param(
            {"figures": {A: EngineFigures(waiting=2)}, "in_flight": {B: 1}},
            "cba",
            id="missing-figures-ranked-by-in-flight",
        ),
        pytest.param(
            # The sample says A is emptiest, but this gateway just sent it three requests.
            {
                "figures": {
                    A: EngineFigures(kv_cache=0.0),
                    B: EngineFigures(kv_cache=0.3),
                    C: EngineFigures(kv_cache=0.3),
                },  # fmt: skip
                "in_flight": {A: 3},
            },
            "bca",
            id="in-flight-covers-scrape-lag",
        ),
        pytest.param(
            {"figures": {B: EngineFigures(waiting=4)}, "cooling": (A,)},
            "cba",
            id="cooling-last",
        ),
        pytest.param(
            {"figures": {A: EngineFigures(running=30), B: EngineFigures(running=0)}},
            "abc",
            id="running-alone-does-not-rank",
        ),
    ],
)
def test_kv_cache_load(state: dict[str, Any], expected: str) -> None:
    assert names(rank(KV_CACHE_LOAD, ABC, load(**state))) == expected


@pytest.mark.parametrize(
    ("requests", "least", "allowed"),
    [
        (0, 0, True),
        (4, 0, True),
        (5, 0, False),  # at low load, four more than the least at most
        (12, 8, True),
        (13, 8, False),
        (48, 32, True),  # at high load, half as many again
        (49, 32, False),
        (150, 100, True),
        (151, 100, False),
    ],
)
def test_load_bound(requests: int, least: int, allowed: bool) -> None:
    assert within_bound(requests, least) is allowed


# prefix_cache: `matched` is blocks held per instance (PrefixTable.matched).
@pytest.mark.parametrize(
    ("state", "matched", "expected"),
    [
        pytest.param({}, {}, "abc", id="nothing-matched-least-outstanding"),
        pytest.param({}, {B: 3}, "bac", id="holder-first"),
        pytest.param({}, {B: 3, C: 5}, "cab", id="longest-prefix-first"),
        pytest.param({"in_flight": {C: 4}}, {C: 5}, "cab", id="holder-within-bound"),
        pytest.param({"in_flight": {C: 5}}, {C: 5}, "abc", id="holder-over-bound"),
        pytest.param(
            {"in_flight": {C: 5}}, {B: 2, C: 5}, "bac", id="over-bound-next-longest-within"
        ),
        pytest.param(
            {"in_flight": {A: 32, B: 32, C: 40}}, {C: 1}, "cab", id="bound-grows-with-load"
        ),
        pytest.param({"cooling": (B,)}, {B: 4}, "acb", id="cooling-holder-passed-over"),
        pytest.param({"in_flight": {A: 1}}, {A: 2, C: 2}, "cba", id="equal-prefix-less-loaded"),
    ],
)
def test_prefix_cache(
    state: dict[str, Any], matched: dict[RoutedInstance, int], expected: str
) -> None:
    blocks = {i.url: n for i, n in matched.items()}
    assert names(rank(PREFIX_CACHE, ABC, load(**state), matched=blocks)) == expected


def test_session_goes_to_the_highest_rendezvous_weight() -> None:
    for session in ("s1", "s2", "user-42", "é"):
        chosen = max(ABC, key=lambda i: rendezvous_weight(session, i.name))
        ranked = rank(SESSION, ABC, load(), RoutingKey(session=session))
        assert ranked[0] == chosen
        assert sorted(names(ranked)) == ["a", "b", "c"]


def test_sessions_spread_and_stay_when_an_instance_leaves() -> None:
    sessions = [f"session-{n}" for n in range(300)]
    before = {s: rank(SESSION, ABC, load(), RoutingKey(session=s))[0] for s in sessions}
    assert min(Counter(before.values()).values()) > 60  # about a third each
    after = {s: rank(SESSION, [A, B], load(), RoutingKey(session=s))[0] for s in sessions}
    # Only C's sessions move: rendezvous hashing's point.
    assert all(after[s] == before[s] for s in sessions if before[s] != C)


@pytest.mark.parametrize(
    ("in_flight", "cooling", "session_first"),
    [
        pytest.param(0, False, True, id="idle"),
        pytest.param(4, False, True, id="within-bound"),
        pytest.param(5, False, False, id="over-bound"),
        pytest.param(0, True, False, id="cooling"),
    ],
)
def test_session_within_the_load_bound(in_flight: int, cooling: bool, session_first: bool) -> None:
    key = RoutingKey(session="user-7")
    chosen = rank(SESSION, ABC, load(), key)[0]
    state = load({chosen: in_flight}, cooling=(chosen,) if cooling else ())
    assert (rank(SESSION, ABC, state, key)[0] == chosen) is session_first


def test_no_session_is_least_outstanding() -> None:
    assert names(rank(SESSION, ABC, load({A: 1}), RoutingKey())) == "bca"
    assert names(rank(SESSION, ABC, load({A: 1}), None)) == "bca"


def test_prompt_blocks_are_whole_chained_blocks() -> None:
    text = "x" * (BLOCK_CHARS * 3 + 10)
    blocks = prompt_blocks(text, "svc")
    assert len(blocks) == 3  # the partial fourth is left out
    assert len(set(blocks)) == 3  # the same text, but chained: each covers what precedes it
    assert prompt_blocks("y" * BLOCK_CHARS + text[BLOCK_CHARS:], "svc")[1:] != blocks[1:]
    assert prompt_blocks(text, "svc") == blocks
    assert prompt_blocks(text, "other")[0] != blocks[0]  # seeded per service
    assert len(prompt_blocks("z" * BLOCK_CHARS * (MAX_BLOCKS + 5), "svc")) == MAX_BLOCKS


def test_prefix_table_matches_the_deepest_block_an_instance_holds() -> None:
    table = PrefixTable()
    shared = "s" * BLOCK_CHARS * 2
    first = prompt_blocks(shared + "a" * BLOCK_CHARS * 2, "svc")
    second = prompt_blocks(shared + "b" * BLOCK_CHARS, "svc")
    table.record(first, A.url)
    assert table.matched(first) == {A.url: 4}
    table.record(second, B.url)  # the shared head now belongs to B
    assert table.matched(first) == {B.url: 2, A.url: 4}
    assert table.matched(second) == {B.url: 3}
    assert table.matched(prompt_blocks("q" * BLOCK_CHARS * 3, "svc")) == {}


def test_prefix_table_is_a_bounded_lru_that_keeps_heads_longest() -> None:
    table = PrefixTable(capacity=4)
    old = prompt_blocks("o" * BLOCK_CHARS * 3, "svc")
    table.record(old, A.url)
    new = prompt_blocks("n" * BLOCK_CHARS * 2, "svc")
    table.record(new, B.url)
    assert len(table) == 4
    assert table.matched(new) == {B.url: 2}
    # The old prompt lost its deepest block, not its head.
    assert table.matched(old) == {A.url: 2}


def test_balancer_routes_a_repeated_prefix_to_one_instance() -> None:
    balancer = Balancer()
    prompt = "You are a helpful assistant. " * 20
    first = balancer.ranked("svc", ABC, policy=PREFIX_CACHE, key=RoutingKey(prompt + "Q1"))[0]
    picks = {
        balancer.ranked("svc", ABC, policy=PREFIX_CACHE, key=RoutingKey(prompt + f"Q{n}"))[0]
        for n in range(2, 12)
    }
    assert picks == {first}
    # Under least_outstanding the same requests rotate.
    spread = {balancer.ranked("svc", ABC, key=RoutingKey(prompt))[0] for _ in range(3)}
    assert spread == set(ABC)


def test_over_the_bound_a_request_goes_elsewhere_but_the_prefix_stays_home() -> None:
    balancer = Balancer()
    key = RoutingKey("p" * BLOCK_CHARS * 4)
    owner = balancer.ranked("svc", ABC, policy=PREFIX_CACHE, key=key)[0]
    for _ in range(5):
        balancer.acquire(owner.url)
    elsewhere = balancer.ranked("svc", ABC, policy=PREFIX_CACHE, key=key)[0]
    assert elsewhere != owner
    # The owner's engine still caches the prefix: once it is free again, it gets it back
    # (moving the prefix on every overflow would make both engines' caches churn).
    for _ in range(5):
        balancer.release(owner.url)
    assert balancer.ranked("svc", ABC, policy=PREFIX_CACHE, key=key)[0] == owner
    # An owner that left the pool hands its prefixes to whoever serves them next.
    rest = [i for i in ABC if i != owner]
    heir = balancer.ranked("svc", rest, policy=PREFIX_CACHE, key=key)[0]
    assert balancer.ranked("svc", ABC, policy=PREFIX_CACHE, key=key)[0] == heir


def test_balancer_records_a_sole_instance_as_owner() -> None:
    balancer = Balancer()
    key = RoutingKey("p" * BLOCK_CHARS * 2)
    balancer.ranked("svc", [C], policy=PREFIX_CACHE, key=key)
    assert {balancer.ranked("svc", ABC, policy=PREFIX_CACHE, key=key)[0] for _ in range(5)} == {C}


def test_prefill_pool_has_a_table_of_its_own() -> None:
    balancer = Balancer()
    key = RoutingKey("p" * BLOCK_CHARS * 2)
    balancer.ranked("svc", [A], policy=PREFIX_CACHE, key=key)
    assert balancer.ranked("svc/prefill", [B, C], policy=PREFIX_CACHE, key=key)[0] == B
    # Its turn now puts C first; the prefix keeps B.
    assert balancer.ranked("svc/prefill", [B, C], policy=PREFIX_CACHE, key=key)[0] == B


def test_balancer_ranks_by_engine_figures() -> None:
    balancer = Balancer()
    balancer.figures = {A.url: EngineFigures(waiting=5), B.url: EngineFigures(kv_cache=0.6)}
    assert {balancer.ranked("svc", ABC, policy=KV_CACHE_LOAD)[0] for _ in range(4)} == {C}
    assert policies.kv_score(A.url, Load(figures=balancer.figures)) == 5


@pytest.mark.parametrize(
    ("held", "state", "expected"),
    [
        pytest.param({A.url: 40, B.url: 10, C.url: 30}, {}, "b", id="fewest-held-blocks"),
        pytest.param({A.url: 40, B.url: 10, C.url: 10}, {}, "b", id="ties-in-turn"),
        pytest.param({}, {"in_flight": {A: 1}}, "b", id="none-held-least-loaded"),
        pytest.param({A.url: 40}, {"cooling": (B, C)}, "a", id="cooling-never-preferred"),
        # B holds least, but is 5 past the least loaded one (bound 4): C, the next emptiest
        pytest.param({A.url: 40, B.url: 0, C.url: 20}, {"in_flight": {B: 5}}, "c",
                     id="over-the-bound-skipped"),
    ],
)  # fmt: skip
def test_a_new_prefix_goes_to_the_instance_holding_the_fewest_blocks(held, state, expected):
    ranked = rank(PREFIX_CACHE, ABC, load(**state), matched={}, held=held)
    assert ranked[0].name == expected
    assert sorted(names(ranked)) == ["a", "b", "c"]


def test_the_table_counts_the_blocks_each_instance_owns():
    table = PrefixTable(capacity=5)
    table.record([1, 2, 3], A.url)
    table.record([1, 2, 4], B.url, live={A.url, B.url})  # 1 and 2 stay A's
    assert dict(table.held()) == {A.url: 3, B.url: 1}
    table.record([1, 5], B.url, live={B.url})  # A left the pool: its block 1 is B's now
    assert dict(table.held()) == {A.url: 2, B.url: 3}
    table.record([6], C.url)  # over capacity: the least recent (3, A's) goes
    assert dict(table.held()) == {A.url: 1, B.url: 3, C.url: 1}
    assert len(table) == 5


def test_prompts_spread_evenly_over_the_caches_and_stay_where_they_went() -> None:
    balancer = Balancer()
    prompts = [f"system prompt {n} " * 40 for n in range(6)]
    homes = {}
    for prompt in prompts:
        home = balancer.ranked("svc", ABC, policy=PREFIX_CACHE, key=RoutingKey(prompt))[0]
        balancer.acquire(home.url)  # still running when the next prompt comes
        homes[prompt] = home
    assert Counter(i.name for i in homes.values()) == {"a": 2, "b": 2, "c": 2}
    for url in {i.url for i in homes.values()}:
        while balancer.in_flight(url):
            balancer.release(url)
    for prompt in prompts:
        again = balancer.ranked("svc", ABC, policy=PREFIX_CACHE, key=RoutingKey(prompt + "?"))
        assert again[0] == homes[prompt]


def sql(*adapters: str) -> EngineFigures:
    return EngineFigures(adapters=frozenset(adapters))


@pytest.mark.parametrize(
    ("policy", "state", "expected"),
    [
        pytest.param(LEAST_OUTSTANDING, {"figures": {B: sql("sql")}}, "bac", id="resident-first"),
        pytest.param(LEAST_OUTSTANDING, {"figures": {A: sql("sql"), B: sql("sql")}}, "abc",
                     id="first-has-it"),
        pytest.param(LEAST_OUTSTANDING, {"figures": {C: sql("chat")}}, "abc",
                     id="nobody-has-it"),
        pytest.param(LEAST_OUTSTANDING, {"figures": {C: sql("sql")}, "in_flight": {C: 4}},
                     "cab", id="within-the-bound"),
        pytest.param(LEAST_OUTSTANDING, {"figures": {C: sql("sql")}, "in_flight": {C: 5}},
                     "abc", id="past-the-bound-load-wins"),
        pytest.param(LEAST_OUTSTANDING, {"figures": {B: sql("sql")}, "cooling": (B,)}, "acb",
                     id="cooling-never-preferred"),
        pytest.param(KV_CACHE_LOAD, {"figures": {A: EngineFigures(waiting=1),
                                                 C: EngineFigures(adapters=frozenset({"sql"}))}},
                     "cba", id="any-policy"),
        pytest.param(ROUND_ROBIN, {"figures": {C: sql("sql")}}, "cab", id="round-robin-too"),
    ],
)  # fmt: skip
def test_an_engine_with_the_adapter_in_a_slot_is_preferred(
    policy: str, state: dict[str, Any], expected: str
) -> None:
    key = RoutingKey(adapter="sql")
    assert names(rank(policy, ABC, load(**state), key)) == expected
