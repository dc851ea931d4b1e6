"""Fleet placement: which node, and which cards on it, each new instance goes to."""

from __future__ import annotations

import random

import pytest

from workers.scheduling.placement import (
    Card,
    Held,
    Need,
    NodeOffer,
    Placed,
    Unplaced,
    free_ports,
    node_states,
    place,
    place_on,
)


def node(name: str, gpus: int = 8, kind: str = "gpu", **fields) -> NodeOffer:
    cards = tuple(Card(kind, i, 81559) for i in range(gpus))
    return NodeOffer(name, cards, **fields)


def gpu(key: str, cards: int = 1, service: str = "svc", **fields) -> Need:
    return Need(key, service, "gpu", cards, **fields)


def held(node_name: str, *cards: int, service: str = "other", kind: str = "gpu", **fields):
    return Held(node_name, service, kind, cards, **fields)


# --- where each need goes --------------------------------------------------------------------

# (needs, nodes, held, expected: key -> (node, cards))
CHOICES = [
    pytest.param(
        [gpu("i1"), gpu("i2"), gpu("i3")],
        [node("a"), node("b"), node("c")],
        [],
        {"i1": ("a", (0,)), "i2": ("b", (0,)), "i3": ("c", (0,))},
        id="spread-replicas-across-nodes",
    ),
    pytest.param(
        [gpu("i1")],
        [node("a"), node("b")],
        [held("a", 0, service="svc")],
        {"i1": ("b", (0,))},
        id="spread-counts-held-instances",
    ),
    pytest.param(
        [gpu("i1", service="svc"), gpu("i2", service="other")],
        [node("a"), node("b")],
        [],
        {"i1": ("a", (0,)), "i2": ("a", (1,))},
        id="other-services-pack-onto-the-same-node",
    ),
    pytest.param(
        [gpu("tp", 4)],
        [node("a"), node("b"), node("c")],
        [held("a", 0, 1, 2, 3, 4, 5), held("b", 2, 3, 4, 5, 6, 7), held("c", 0, 1, 2, 3)],
        {"tp": ("c", (4, 5, 6, 7))},
        id="tensor-parallel-on-one-node-not-split",
    ),
    pytest.param(
        [gpu("i1", 2)],
        [node("a", gpus=4)],
        [held("a", 0, 1)],
        {"i1": ("a", (2, 3))},
        id="held-cards-not-given-again",
    ),
    pytest.param(
        [gpu("i1")],
        [node("a", gpus=2)],
        [Held("a", "other", "", (0,))],
        {"i1": ("a", (1,))},
        id="held-cards-without-kind-block-every-kind",
    ),
    pytest.param(
        [gpu("i1")],
        [node("a")],
        [held("gone", 0, service="svc")],
        {"i1": ("a", (0,))},
        id="held-on-unknown-node-ignored",
    ),
    pytest.param(
        [gpu("i1", selector={"resource": "group-a"})],
        [node("a", labels={"resource": "group-b"}), node("b", labels={"resource": "group-a"})],
        [],
        {"i1": ("b", (0,))},
        id="selector-picks-labelled-node",
    ),
    pytest.param(
        [gpu("i1")],
        [
            node("a", unschedulable="cordoned"),
            node("b", unschedulable="not_ready"),
            node("c", unschedulable="draining"),
            node("d"),
        ],
        [],
        {"i1": ("d", (0,))},
        id="cordoned-not-ready-draining-skipped",
    ),
    pytest.param(
        [gpu("i1", model="qwen")],
        [node("a"), node("b", models=frozenset({"qwen"}))],
        [],
        {"i1": ("b", (0,))},
        id="model-cached-node-preferred",
    ),
    pytest.param(
        [gpu("i1", model="qwen")],
        [node("a", gpus=1), node("b", models=frozenset({"qwen"}))],
        [],
        {"i1": ("b", (0,))},
        id="model-cache-beats-bin-packing",
    ),
    pytest.param(
        [gpu("i1", model="qwen", image="vllm")],
        [node("a", images=frozenset({"vllm"})), node("b", models=frozenset({"qwen"}))],
        [],
        {"i1": ("b", (0,))},
        id="model-cache-beats-image",
    ),
    pytest.param(
        [gpu("i1", image="vllm")],
        [node("a", gpus=1), node("b", images=frozenset({"vllm"}))],
        [],
        {"i1": ("b", (0,))},
        id="image-present-preferred",
    ),
    pytest.param(
        [gpu("i1", model="qwen")],
        [node("a", models=frozenset({"qwen"})), node("b")],
        [held("a", 0, service="svc")],
        {"i1": ("b", (0,))},
        id="spread-beats-model-cache",
    ),
    pytest.param(
        [gpu("i1")],
        [node("big"), node("small", gpus=2)],
        [],
        {"i1": ("small", (0,))},
        id="bin-pack-fullest-node",
    ),
    pytest.param(
        [gpu("i1", 4)],
        [node("a"), node("b")],
        [held("a", 0, 1, 2, 3)],
        {"i1": ("a", (4, 5, 6, 7))},
        id="bin-pack-keeps-whole-node-for-big-instances",
    ),
    pytest.param(
        [Need("cpu-only", "svc", cpu=1)],
        [node("gpus"), node("busy", gpus=2), node("cpus", gpus=0)],
        [held("busy", 0)],
        {"cpu-only": ("cpus", ())},
        id="cardless-need-prefers-fewest-free-cards",
    ),
    pytest.param(
        [gpu("i1"), gpu("i2")],
        [node("b"), node("a")],
        [],
        {"i1": ("a", (0,)), "i2": ("b", (0,))},
        id="ties-go-to-node-name",
    ),
    pytest.param(
        [gpu("i1", 2)],
        [node("a")],
        [held("a", 1), held("a", 4)],
        {"i1": ("a", (2, 3))},
        id="lowest-contiguous-run",
    ),
    pytest.param(
        [gpu("i1", 3)],
        [node("a")],
        [held("a", 1), held("a", 4)],
        {"i1": ("a", (5, 6, 7))},
        id="contiguous-run-over-lowest-indexes",
    ),
    pytest.param(
        [gpu("i1", 2)],
        [node("a", gpus=4)],
        [held("a", 1), held("a", 3)],
        {"i1": ("a", (0, 2))},
        id="lowest-free-when-no-run",
    ),
    pytest.param(
        [gpu("i1", cpu=2)],
        [node("a", gpus=1, cpus=4), node("b", cpus=4)],
        [held("a", service="x", cpu=3)],
        {"i1": ("b", (0,))},
        id="cpu-limit-skips-node",
    ),
    pytest.param(
        [gpu("i1", memory_mb=4096)],
        [node("a", gpus=1, memory_mb=8192), node("b", memory_mb=8192)],
        [held("a", service="x", memory_mb=5000)],
        {"i1": ("b", (0,))},
        id="memory-limit-skips-node",
    ),
    pytest.param(
        [gpu("i1", cpu=64, memory_mb=1 << 20)],
        [node("a")],
        [held("a", service="x", cpu=100, memory_mb=1 << 30)],
        {"i1": ("a", (0,))},
        id="unknown-cpu-and-memory-not-checked",
    ),
    pytest.param(
        [gpu("i1", cpu=0.5)],
        [node("a", cpus=1)],
        [held("a", service="x", cpu=0.3), held("a", service="y", cpu=0.2)],
        {"i1": ("a", (0,))},
        id="fractional-cpus-fit-exactly",
    ),
    pytest.param(
        [gpu("first", 4), gpu("second", 4, service="other")],
        [node("a", gpus=4), node("b")],
        [],
        {"first": ("a", (0, 1, 2, 3)), "second": ("b", (0, 1, 2, 3))},
        id="later-needs-see-earlier-cards",
    ),
    pytest.param(
        [gpu("first", cpu=3), gpu("second", service="other", cpu=3)],
        [node("a", cpus=4), node("b", cpus=4)],
        [],
        {"first": ("a", (0,)), "second": ("b", (0,))},
        id="later-needs-see-earlier-cpu",
    ),
    pytest.param(
        [Need("npu", "svc", "npu", 2), gpu("gpu")],
        [node("a", kind="npu"), node("b")],
        [],
        {"npu": ("a", (0, 1)), "gpu": ("b", (0,))},
        id="card-kind-must-match",
    ),
]


@pytest.mark.parametrize("needs, nodes, holds, expected", CHOICES)
def test_places_on_expected_node_and_cards(needs, nodes, holds, expected):
    results = place(needs, nodes, holds)
    assert [r.key for r in results] == [n.key for n in needs]
    assert {r.key: (r.node, r.cards) for r in results if isinstance(r, Placed)} == expected


# --- why nothing fits ------------------------------------------------------------------------

# (need, nodes, held, message)
REFUSALS = [
    pytest.param(gpu("i1"), [], [], "no nodes", id="no-nodes"),
    pytest.param(
        gpu("i1", 2),
        [node("a")],
        [held("a", *range(7))],
        "a: 1 free gpu of 8, needs 2",
        id="too-few-free-cards-with-total",
    ),
    pytest.param(
        gpu("i1", 16), [node("a")], [], "a: 8 free gpu of 8, needs 16", id="node-too-small"
    ),
    pytest.param(
        Need("i1", "svc", "npu", 1), [node("a")], [], "a: has no npu", id="no-card-of-kind"
    ),
    pytest.param(
        gpu("i1"),
        [
            node("a", unschedulable="cordoned"),
            node("b", unschedulable="not_ready"),
            node("c", unschedulable="draining"),
        ],
        [],
        "a: cordoned; b: not ready; c: draining",
        id="unschedulable-states",
    ),
    pytest.param(
        gpu("i1", selector={"resource": "group-a"}),
        [node("a"), node("b", labels={"resource": "group-b"})],
        [],
        "a: lacks label resource=group-a; b: label resource is group-b, not group-a",
        id="missing-and-different-labels",
    ),
    pytest.param(
        gpu("i1", cpu=2),
        [node("a", cpus=4)],
        [held("a", cpu=3.5)],
        "a: 0.5 free CPUs, needs 2",
        id="cpu",
    ),
    pytest.param(
        gpu("i1", memory_mb=4096),
        [node("a", memory_mb=8192)],
        [held("a", memory_mb=7168)],
        "a: 1024 MB free memory, needs 4096",
        id="memory",
    ),
    pytest.param(
        gpu("i1", cpu=1),
        [node("a", cpus=4)],
        [held("a", cpu=6)],
        "a: 0 free CPUs, needs 1",
        id="overcommitted-cpu-reads-zero",
    ),
    pytest.param(
        gpu("i1", 2, cpu=2, selector={"zone": "x"}),
        [node("a", gpus=1, cpus=1, unschedulable="cordoned")],
        [],
        "a: cordoned and lacks label zone=x and 1 free gpu of 1, needs 2 and 1 free CPUs, needs 2",
        id="every-reason-on-a-node",
    ),
]


@pytest.mark.parametrize("need, nodes, holds, message", REFUSALS)
def test_unplaced_says_what_each_node_lacks(need, nodes, holds, message):
    [result] = place([need], nodes, holds)
    assert isinstance(result, Unplaced)
    assert result.key == need.key
    assert result.message() == message
    assert set(result.reasons) == {n.name for n in nodes}


@pytest.mark.parametrize(
    "reasons, message",
    [
        pytest.param({"a": "cordoned", "b": "cordoned"}, "a, b: cordoned", id="two-alike"),
        pytest.param(
            {"a": "cordoned", "b": "not ready", "c": "cordoned"},
            "a, c: cordoned; b: not ready",
            id="grouped-in-first-seen-order",
        ),
        pytest.param(
            {f"n{i}": "0 free gpu of 8, needs 1" for i in range(5)} | {"m": "cordoned"},
            "5 nodes (n0, n1, n2, …): 0 free gpu of 8, needs 1; m: cordoned",
            id="past-three-counted",
        ),
        pytest.param({"a": "x", "b": "x", "c": "x"}, "a, b, c: x", id="three-named"),
        pytest.param({}, "no nodes", id="none-offered"),
    ],
)
def test_the_message_puts_nodes_with_one_reason_together(reasons, message):
    assert Unplaced("i1", reasons).message() == message


def test_until_unplaced_stops_at_the_first_need_that_fits_nowhere():
    needs = [gpu("first", 3), gpu("big", 8), gpu("third", 1)]
    states = node_states([node("a", gpus=4), node("b", gpus=4)], [])
    first, big = place_on(needs, states, until_unplaced=True)
    assert first == Placed("first", "a", (0, 1, 2))
    assert big == Unplaced(
        "big", {"a": "1 free gpu of 4, needs 8", "b": "4 free gpu of 4, needs 8"}
    )
    assert [len(s.free["gpu"]) for s in states] == [1, 4]  # the third took nothing
    *_, third = place_on(needs, node_states([node("a", gpus=4), node("b", gpus=4)], []))
    assert isinstance(third, Placed)  # without it, the needs after go on


def test_later_need_refused_with_what_earlier_ones_took():
    needs = [gpu("first", 3), gpu("second", 2, service="other")]
    first, second = place(needs, [node("a", gpus=4)], [])
    assert first == Placed("first", "a", (0, 1, 2))
    assert second == Unplaced("second", {"a": "1 free gpu of 4, needs 2"})


# --- inputs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"cards": 2}, id="cards-without-kind"),
        pytest.param({"kind": "gpu", "cards": -1}, id="negative-cards"),
        pytest.param({"cpu": -1}, id="negative-cpu"),
    ],
)
def test_rejects_malformed_need(fields):
    with pytest.raises(ValueError):
        Need("i1", "svc", **fields)


def test_rejects_node_offered_twice():
    with pytest.raises(ValueError, match="offered twice"):
        place([gpu("i1")], [node("a"), node("a")], [])


def test_records_are_hashable_and_keep_their_own_labels():
    labels = {"resource": "group-a"}
    offer = node("a", labels=labels)
    need = gpu("i1", selector=labels)
    labels["resource"] = "group-b"
    assert offer.labels == {"resource": "group-a"} and need.selector == {"resource": "group-a"}
    assert len({offer, node("a", labels={"resource": "group-a"})}) == 1
    assert hash(need) == hash(gpu("i1", selector={"resource": "group-a"}))


# --- property: a random fleet ----------------------------------------------------------------


def random_fleet(rng: random.Random) -> tuple[list[Need], list[NodeOffer], list[Held]]:
    nodes, holds = [], []
    for i in range(rng.randint(0, 12)):
        kind = rng.choice(("gpu", "npu"))
        cards = tuple(Card(kind, c, 65536) for c in rng.sample(range(10), rng.randint(0, 8)))
        offer = NodeOffer(
            f"n{i}",
            cards,
            cpus=rng.choice((0, 8, 32)),
            memory_mb=rng.choice((0, 65536, 262144)),
            labels=rng.choice(({}, {"resource": "a"}, {"resource": "b"})),
            unschedulable=rng.choice(("",) * 6 + ("cordoned", "not_ready", "draining")),
        )
        nodes.append(offer)
        free = [c.index for c in cards]
        for _ in range(rng.randint(0, 2)):
            taken = rng.sample(free, min(len(free), rng.randint(0, 2)))
            free = [c for c in free if c not in taken]
            holds.append(Held(offer.name, f"s{rng.randrange(4)}", kind, tuple(taken), 1, 4096))
    needs = [
        Need(
            f"k{j}",
            f"s{rng.randrange(4)}",
            *rng.choice((("", 0), ("gpu", 1), ("gpu", 2), ("npu", 4), ("gpu", 8))),
            cpu=rng.choice((0, 0.5, 4)),
            memory_mb=rng.choice((0, 8192, 65536)),
            selector=rng.choice(({}, {}, {"resource": "a"})),
        )
        for j in range(rng.randint(0, 40))
    ]
    return needs, nodes, holds


@pytest.mark.parametrize("seed", range(50))
def test_random_fleet_never_double_books_and_places_only_where_it_fits(seed):
    rng = random.Random(seed)
    needs, nodes, holds = random_fleet(rng)
    results = place(needs, nodes, holds)
    by_name = {n.name: n for n in nodes}
    booked = {(h.node, h.kind, c) for h in holds for c in h.cards}
    cpu = {n.name: sum(h.cpu for h in holds if h.node == n.name) for n in nodes}
    memory = {n.name: sum(h.memory_mb for h in holds if h.node == n.name) for n in nodes}
    for need, result in zip(needs, results, strict=True):
        assert result.key == need.key
        if isinstance(result, Unplaced):
            assert set(result.reasons) == set(by_name)
            assert all(result.reasons.values())
            continue
        offer = by_name[result.node]
        assert not offer.unschedulable
        assert all(offer.labels.get(k) == v for k, v in need.selector.items())
        assert len(result.cards) == need.cards
        present = {c.index for c in offer.cards if c.kind == need.kind}
        for index in result.cards:
            assert index in present
            assert (offer.name, need.kind, index) not in booked, "card given twice"
            booked.add((offer.name, need.kind, index))
        cpu[offer.name] += need.cpu
        memory[offer.name] += need.memory_mb
        assert not offer.cpus or cpu[offer.name] <= offer.cpus + 1e-9
        assert not offer.memory_mb or memory[offer.name] <= offer.memory_mb
    rng.shuffle(nodes)
    assert place(needs, nodes, holds) == results, "the nodes' order must not matter"


@pytest.mark.parametrize(
    ("taken", "count", "low", "high", "ports"),
    [
        ((), 2, 30000, 30009, (30000, 30001)),
        ((30000, 30002), 2, 30000, 30009, (30001, 30003)),
        ((30000, 30001), 1, 30000, 30001, None),  # the range is full
        ((), 3, 30000, 30001, None),  # smaller than asked
        ((29999, 30010), 2, 30000, 30001, (30000, 30001)),  # ports outside don't matter
    ],
)
def test_free_ports(taken, count, low, high, ports):
    assert free_ports(taken, count, low, high) == ports
