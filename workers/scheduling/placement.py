"""Where each new instance goes: which node, and which cards on it. Pure (no Django, no I/O),
so the scheduler's choices are tested without servers and the same call explains a refusal.

Needs are placed in order and each sees what the earlier ones took. A need fits a node with
the cards, CPUs, memory and disk it asks for free (and, with spread "host", none of its
service's instances). Among the nodes where it fits it prefers, in turn: (0) with spread
"zone", the zone with the fewest of its service's instances; (1) the fewest instances of its
service already there, so one
node's loss takes few replicas; (2) a node that has its model cached, then its engine image,
so it starts without a download; (3) the fewest free cards of its kind left afterwards, so
large nodes stay whole for big tensor-parallel instances; (4) the node's name, so the same
input always gives the same answer. A need here never spans nodes: an instance that does
(unit.size > 1) is a gang, placed whole by workers.scheduling.gang on the same node states.

Free resources are kept per node and updated as needs are placed; nothing is recomputed from
the held list per need (1,000 needs on 100 nodes must take well under a second).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from workers.nodes.devices import first_contiguous  # the node-local allocator's rule, shared

# Where a node's zone is read from when it has no `zone` label (Kubernetes' well-known label).
ZONE_LABEL = "topology.kubernetes.io/zone"
# CPUs are fractional (0.5, 0.1 + 0.2 ...): a need equal to what is free must fit.
CPU_TOLERANCE = 1e-9
# An unplaced need's message names up to this many nodes that share a reason, then counts them.
GROUP_NAMED = 3


@dataclass(frozen=True)
class Card:
    kind: str  # "gpu" | "npu"
    index: int
    memory_mb: int


# Mappings are copied on construction and left out of the hash (equality still compares
# them): the records stay hashable and picklable, and a caller's later edit cannot reach in.


@dataclass(frozen=True)
class NodeOffer:
    name: str
    cards: tuple[Card, ...] = ()
    cpus: float = 0  # 0 = unknown: not a constraint
    memory_mb: int = 0  # 0 = unknown: not a constraint
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    unschedulable: str = ""  # "" or why it takes nothing new: "not_ready", "cordoned", "draining"
    models: frozenset[str] = frozenset()  # model sources already cached on the node
    images: frozenset[str] = frozenset()  # engine images present on the node
    disk_mb: int = 0  # the disk its instances write to; 0 = unknown: not a constraint

    def __post_init__(self) -> None:
        object.__setattr__(self, "cards", tuple(self.cards))
        object.__setattr__(self, "labels", dict(self.labels))
        object.__setattr__(self, "models", frozenset(self.models))
        object.__setattr__(self, "images", frozenset(self.images))


@dataclass(frozen=True)
class Held:
    """An instance already assigned to a node: it holds resources there. Its cards are
    indexes of `kind`; with no kind they are taken as of every kind on the node, because
    handing a card out twice is worse than leaving one idle."""

    node: str
    service: str
    kind: str = ""
    cards: tuple[int, ...] = ()
    cpu: float = 0
    memory_mb: int = 0
    disk_mb: int = 0


@dataclass(frozen=True)
class Need:
    """An instance to place; `cards` of `kind`, all on one node."""

    key: str  # the instance name
    service: str
    kind: str = ""  # card kind, "" for none
    cards: int = 0
    cpu: float = 0
    memory_mb: int = 0
    selector: Mapping[str, str] = field(default_factory=dict, hash=False)  # labels required
    model: str = ""  # preferred: nodes whose `models` contain it
    image: str = ""  # preferred: nodes whose `images` contain it
    disk_mb: int = 0
    spread: str = "default"  # "host": one per node; "zone": across zones first

    def __post_init__(self) -> None:
        if min(self.cards, self.cpu, self.memory_mb, self.disk_mb) < 0:
            raise ValueError(f"{self.key}: cards, cpu, memory_mb and disk_mb must be >= 0")
        if self.cards and not self.kind:
            raise ValueError(f"{self.key}: needs {self.cards} cards but names no kind")
        object.__setattr__(self, "selector", dict(self.selector))


@dataclass(frozen=True)
class Placed:
    key: str
    node: str
    cards: tuple[int, ...]


@dataclass(frozen=True)
class Unplaced:
    key: str
    reasons: dict[str, str] = field(hash=False)  # node name -> what is missing there

    def message(self) -> str:
        """Every node's reason on one line, nodes with the same reason together (`node-a,
        node-b: cordoned; node-c: 1 free gpu of 8, needs 2`; past three nodes, their count
        and the first three), or "no nodes" when none was offered."""
        if not self.reasons:
            return "no nodes"
        alike: dict[str, list[str]] = {}
        for node, why in self.reasons.items():
            alike.setdefault(why, []).append(node)
        return "; ".join(f"{_nodes(names)}: {why}" for why, names in alike.items())


def _nodes(names: list[str]) -> str:
    if len(names) <= GROUP_NAMED:
        return ", ".join(names)
    return f"{len(names)} nodes ({', '.join(names[:GROUP_NAMED])}, …)"


class NodeState:
    """What is still free on one node while a call places its needs."""

    __slots__ = ("offer", "free", "total", "free_cards", "cpu", "memory", "disk", "services",
                 "zones")  # fmt: skip

    def __init__(self, offer: NodeOffer, zones: dict[tuple[str, str], int]):
        self.offer = offer
        self.zones = zones  # (zone, service) -> its instances there, shared by every node
        indexes: dict[str, set[int]] = {}
        for card in offer.cards:
            indexes.setdefault(card.kind, set()).add(card.index)
        self.total = {kind: len(found) for kind, found in indexes.items()}
        self.free: dict[str, list[int]] = {k: sorted(found) for k, found in indexes.items()}
        self.free_cards = sum(self.total.values())
        self.cpu = float(offer.cpus)
        self.memory = offer.memory_mb
        self.disk = offer.disk_mb
        self.services: dict[str, int] = {}

    def copy(self, offer: NodeOffer, zones: dict[tuple[str, str], int]) -> NodeState:
        """This state for another pass to take from, with the node's `offer` as it is now (the
        same resources; only whether it takes anything new may differ) and that pass's `zones`.
        What `hold` changes is copied; the lists of free cards it replaces, not edits, are
        shared."""
        new = NodeState.__new__(NodeState)
        new.offer, new.zones = offer, zones
        new.total, new.free, new.free_cards = self.total, dict(self.free), self.free_cards
        new.cpu, new.memory, new.disk = self.cpu, self.memory, self.disk
        new.services = dict(self.services)
        return new

    @property
    def zone(self) -> str:
        labels = self.offer.labels
        return labels.get("zone") or labels.get(ZONE_LABEL) or ""

    def hold(
        self, service: str, kind: str, cards: Sequence[int], cpu: float, memory: int, disk: int
    ) -> None:
        self.services[service] = self.services.get(service, 0) + 1
        self.zones[self.zone, service] = self.zones.get((self.zone, service), 0) + 1
        self.cpu -= cpu
        self.memory -= memory
        self.disk -= disk
        taken = set(cards)
        for each in (kind,) if kind else tuple(self.free):
            free = self.free.get(each)
            if free and taken.intersection(free):
                self.free[each] = [i for i in free if i not in taken]
                self.free_cards -= len(free) - len(self.free[each])

    def fits(self, need: Need) -> bool:
        offer = self.offer
        return (
            (not need.cards or len(self.free.get(need.kind, ())) >= need.cards)
            and (not offer.cpus or self.cpu + CPU_TOLERANCE >= need.cpu)
            and (not offer.memory_mb or self.memory >= need.memory_mb)
            and (not offer.disk_mb or self.disk >= need.disk_mb)
            and (need.spread != "host" or not self.services.get(need.service))
        )

    def rank(self, need: Need) -> tuple[int, int, bool, bool, int]:
        """Smaller is better; ties go to the earlier node in name order."""
        offer = self.offer
        left = len(self.free.get(need.kind, ())) if need.kind else self.free_cards
        return (
            self.zones.get((self.zone, need.service), 0) if need.spread == "zone" else 0,
            self.services.get(need.service, 0),
            bool(need.model) and need.model not in offer.models,
            bool(need.image) and need.image not in offer.images,
            left - need.cards,
        )

    def take(self, need: Need) -> tuple[int, ...]:
        chosen: tuple[int, ...] = ()
        if need.cards:
            free = self.free[need.kind]
            chosen = first_contiguous(free, need.cards) or tuple(free[: need.cards])
        self.hold(need.service, need.kind, chosen, need.cpu, need.memory_mb, need.disk_mb)
        return chosen

    def why_not(self, need: Need) -> str:
        """What keeps `need` off this node, in plain words; "" when nothing does."""
        free = len(self.free.get(need.kind, ()))
        total = self.total.get(need.kind, 0)
        reasons = shortfall(self.offer, need, free, total, self.cpu, self.memory, self.disk)
        if need.spread == "host" and self.services.get(need.service):
            host = f"runs an instance of {need.service} already (spread.policy host)"
            reasons = f"{reasons} and {host}" if reasons else host
        return reasons


def shortfall(
    offer: NodeOffer, need: Need, free: int, total: int, cpu: float, memory: int, disk: int = 0
) -> str:
    """What keeps `need` off a node that has `free` of its `total` cards of the kind, `cpu`
    CPUs, `memory` MB and `disk` MB left, in plain words; "" when nothing does."""
    reasons = [offer.unschedulable.replace("_", " ")] if offer.unschedulable else []
    for key, value in need.selector.items():
        if key not in offer.labels:
            reasons.append(f"lacks label {key}={value}")
        elif offer.labels[key] != value:
            reasons.append(f"label {key} is {offer.labels[key]}, not {value}")
    if need.cards and not total:
        reasons.append(f"has no {need.kind}")
    elif free < need.cards:
        reasons.append(f"{free} free {need.kind} of {total}, needs {need.cards}")
    if offer.cpus and cpu + CPU_TOLERANCE < need.cpu:
        reasons.append(f"{max(cpu, 0):g} free CPUs, needs {need.cpu:g}")
    if offer.memory_mb and memory < need.memory_mb:
        reasons.append(f"{max(memory, 0)} MB free memory, needs {need.memory_mb}")
    if offer.disk_mb and disk < need.disk_mb:
        reasons.append(f"{max(disk, 0)} MB free disk, needs {need.disk_mb}")
    return " and ".join(reasons)


def matches(offer: NodeOffer, selector: Mapping[str, str]) -> bool:
    return all(offer.labels.get(key) == value for key, value in selector.items())


def node_states(nodes: Sequence[NodeOffer], held: Sequence[Held]) -> list[NodeState]:
    """Every node's free state after what `held` holds, in name order."""
    by_name: dict[str, NodeState] = {}
    zones: dict[tuple[str, str], int] = {}
    for offer in nodes:
        if offer.name in by_name:
            raise ValueError(f"node {offer.name!r} is offered twice")
        by_name[offer.name] = NodeState(offer, zones)
    for h in held:
        node = by_name.get(h.node)
        if node is not None:  # a node that is gone holds nothing we could give out
            node.hold(h.service, h.kind, h.cards, h.cpu, h.memory_mb, h.disk_mb)
    return [by_name[name] for name in sorted(by_name)]


def place(
    needs: Sequence[Need], nodes: Sequence[NodeOffer], held: Sequence[Held]
) -> list[Placed | Unplaced]:
    """One Placed or Unplaced per need, in the needs' order; each need sees the earlier ones.
    Unplaced says, for every node, what is missing there."""
    return place_on(needs, node_states(nodes, held))


def place_on(
    needs: Sequence[Need], states: Sequence[NodeState], until_unplaced: bool = False
) -> list[Placed | Unplaced]:
    """`place` on the nodes' free states (`node_states`, in name order), which it takes from.
    `until_unplaced`: stop at the first need that fits nowhere (the last result), for a caller
    that places nothing after it; the needs after it are neither placed nor explained."""
    # Schedulable nodes with a selector's labels, worked out once per distinct selector.
    candidates: dict[frozenset[tuple[str, str]], list[NodeState]] = {}
    results: list[Placed | Unplaced] = []
    for need in needs:
        selector = frozenset(need.selector.items())
        eligible = candidates.get(selector)
        if eligible is None:
            eligible = [
                n for n in states if not n.offer.unschedulable and matches(n.offer, need.selector)
            ]
            candidates[selector] = eligible
        best, best_rank = None, None
        for node in eligible:
            if node.fits(need):
                rank = node.rank(need)
                if best_rank is None or rank < best_rank:
                    best, best_rank = node, rank
        if best is None:
            results.append(Unplaced(need.key, {n.offer.name: n.why_not(need) for n in states}))
            if until_unplaced:
                break
        else:
            results.append(Placed(need.key, best.offer.name, best.take(need)))
    return results


def free_ports(taken: Iterable[int], count: int, low: int, high: int) -> tuple[int, ...] | None:
    """The `count` lowest ports of `low`..`high` (both included) not in `taken`, the ports a
    node's instances already hold; None when the range has fewer free."""
    used = set(taken)
    found: list[int] = []
    for port in range(low, high + 1):
        if len(found) == count:
            break
        if port not in used:
            found.append(port)
    return tuple(found) if len(found) == count else None
