"""Gang placement (workers.scheduling.gang): every member of an instance that spans hosts placed
together, one per node, in one resource group, or none of them with each node's reason."""

from __future__ import annotations

import pytest

from workers.scheduling.gang import Gang, GangPlaced, place_gangs
from workers.scheduling.placement import Card, Held, Need, NodeOffer, Unplaced


def node(name: str, gpus: int = 8, kind: str = "gpu", group: str = "", **fields) -> NodeOffer:
    cards = tuple(Card(kind, i, 81559) for i in range(gpus))
    labels = {"resource": group} if group else {}
    return NodeOffer(name, cards, labels={**labels, **fields.pop("labels", {})}, **fields)


def gang(key: str, size: int, cards: int = 8, kind: str = "gpu", **fields) -> Gang:
    return Gang(Need(key, "big", kind, cards, **fields), size)


def held(node_name: str, *cards: int) -> Held:
    return Held(node_name, "other", "gpu", cards)


# (gangs, nodes, held, expected: key -> [(node, cards)] in rank order, leader first)
PLACED = [
    pytest.param(
        [gang("i1", 2)],
        [node("a"), node("b"), node("c")],
        [],
        {"i1": [("a", tuple(range(8))), ("b", tuple(range(8)))]},
        id="one-member-per-node-leader-on-the-first",
    ),
    pytest.param(
        [gang("i1", 2, cards=4)],
        [node("a"), node("b"), node("c")],
        [held("a", 0, 1, 2, 3), held("c", 0, 1)],
        {"i1": [("a", (4, 5, 6, 7)), ("c", (2, 3, 4, 5))]},
        id="members-take-the-nodes-with-fewest-cards-left",
    ),
    pytest.param(
        [gang("i1", 2), gang("i2", 2)],
        [node("a"), node("b"), node("c"), node("d")],
        [],
        {
            "i1": [("a", tuple(range(8))), ("b", tuple(range(8)))],
            "i2": [("c", tuple(range(8))), ("d", tuple(range(8)))],
        },
        id="a-second-gang-sees-the-first",
    ),
    pytest.param(
        [gang("i1", 2)],
        [node("a", group="g1"), node("b", group="g2"), node("c", group="g2")],
        [],
        {"i1": [("b", tuple(range(8))), ("c", tuple(range(8)))]},
        id="all-members-in-one-resource-group",
    ),
    pytest.param(
        [gang("i1", 2, cards=2, kind="npu")],
        [node("a", kind="npu"), node("b"), node("c", kind="npu")],
        [],
        {"i1": [("a", (0, 1)), ("c", (0, 1))]},
        id="the-same-card-kind-on-every-member",
    ),
    pytest.param(
        [gang("i1", 2, selector={"resource": "g2"})],
        [
            node("a", group="g1"),
            node("b", group="g1"),
            node("c", group="g2"),
            node("d", group="g2"),
        ],
        [],
        {"i1": [("c", tuple(range(8))), ("d", tuple(range(8)))]},
        id="the-specs-resource-group",
    ),
    pytest.param(
        [gang("i1", 1)],
        [node("a")],
        [],
        {"i1": [("a", tuple(range(8)))]},
        id="a-gang-of-one-is-a-plain-instance",
    ),
]


@pytest.mark.parametrize(("gangs", "nodes", "taken", "expected"), PLACED)
def test_places_every_member_together(gangs, nodes, taken, expected):
    results = place_gangs(gangs, nodes, taken)
    assert all(isinstance(r, GangPlaced) for r in results), results
    found = {r.key: [(m.node, m.cards) for m in r.members] for r in results}
    assert found == expected


def too_few(size: int, found: int, group: str = "") -> str:
    """The reason of a node that takes a member when too few others of its group do."""
    where = f"in resource group {group}" if group else "with no resource group"
    return (
        f"takes a member, but the instance spans {size} nodes (one member each) and only "
        f"{found} {where} take one"
    )


# (gangs, nodes, held, expected reasons of the last gang: node -> reason)
REFUSED = [
    pytest.param(
        [gang("i1", 3)],
        [node("a"), node("b")],
        [],
        {
            "a": too_few(3, 2),
            "b": too_few(3, 2),
        },
        id="too-few-nodes",
    ),
    pytest.param(
        [gang("i1", 2)],
        [node("a"), node("b")],
        [held("b", 7)],
        {
            "a": too_few(2, 1),
            "b": "7 free gpu of 8, needs 8",
        },
        id="a-partial-fit-takes-nothing",
    ),
    pytest.param(
        [gang("i1", 2)],
        [node("a", group="g1"), node("b", group="g2")],
        [],
        {
            "a": too_few(2, 1, "g1"),
            "b": too_few(2, 1, "g2"),
        },
        id="members-never-split-across-resource-groups",
    ),
    pytest.param(
        [gang("i1", 2)],
        [node("a"), node("b", unschedulable="cordoned"), node("c", gpus=4)],
        [],
        {
            "a": too_few(2, 1),
            "b": "cordoned",
            "c": "4 free gpu of 4, needs 8",
        },
        id="each-node-says-why",
    ),
    pytest.param(
        [gang("i1", 2), gang("i2", 2)],
        [node("a"), node("b"), node("c")],
        [],
        {
            "a": "0 free gpu of 8, needs 8",
            "b": "0 free gpu of 8, needs 8",
            "c": too_few(2, 1),
        },
        id="the-second-gang-waits-whole",
    ),
]


@pytest.mark.parametrize(("gangs", "nodes", "taken", "expected"), REFUSED)
def test_a_gang_that_does_not_fit_whole_takes_nothing(gangs, nodes, taken, expected):
    results = place_gangs(gangs, nodes, taken)
    last = results[-1]
    assert isinstance(last, Unplaced)
    assert last.reasons == expected


def test_a_refused_gang_leaves_its_cards_to_the_next():
    results = place_gangs([gang("big", 3), gang("small", 2)], [node("a"), node("b")], [])
    assert isinstance(results[0], Unplaced)
    assert isinstance(results[1], GangPlaced)
    assert [m.node for m in results[1].members] == ["a", "b"]


def test_a_gang_has_at_least_one_member():
    with pytest.raises(ValueError, match="at least one member"):
        gang("i1", 0)
