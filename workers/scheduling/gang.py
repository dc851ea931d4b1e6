"""Gang placement: an instance that spans hosts (the spec's unit.size N > 1) has N members,
placed together or not at all. Pure, on workers.scheduling.placement's node states and rules.

Every member needs the same cards (count and kind, per machine as in EAS), CPUs, memory and
disk; each goes to a different node; all of them to nodes of one resource group (the nodes'
`resource` label: a gang's collectives run over one group's network). Among the groups where
N nodes fit a member, the one whose N best nodes rank best (workers.scheduling.placement's order:
spread, cached model and image, fewest cards left) wins, then the group's name; within it member 0,
the leader that serves HTTP, goes to the best node. A gang that does not fit whole takes
nothing and says, for every node, why it is not enough.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workers.scheduling.placement import (
    Held,
    Need,
    NodeOffer,
    NodeState,
    Placed,
    Unplaced,
    matches,
    node_states,
)

GROUP_LABEL = "resource"  # the node label naming its resource group (metadata.resource)


@dataclass(frozen=True)
class Gang:
    """An instance of `size` members; `member` is what each one needs on its node (its key is
    the instance's name)."""

    member: Need
    size: int

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"{self.member.key}: a gang has at least one member")

    @property
    def key(self) -> str:
        return self.member.key


@dataclass(frozen=True)
class GangPlaced:
    """Where each member of an instance goes, in rank order: members[0] is the leader."""

    key: str
    members: tuple[Placed, ...]

    @property
    def leader(self) -> Placed:
        return self.members[0]


def place_gangs(
    gangs: Sequence[Gang], nodes: Sequence[NodeOffer], held: Sequence[Held]
) -> list[GangPlaced | Unplaced]:
    """One GangPlaced or Unplaced per gang, in order; each sees what the earlier ones took."""
    states = node_states(nodes, held)
    return [_place(gang, states) for gang in gangs]


def _place(gang: Gang, states: list[NodeState]) -> GangPlaced | Unplaced:
    need = gang.member
    groups: dict[str, list[NodeState]] = {}
    for node in states:
        if not node.offer.unschedulable and matches(node.offer, need.selector) and node.fits(need):
            groups.setdefault(node.offer.labels.get(GROUP_LABEL, ""), []).append(node)
    choices = []
    for group, fitting in groups.items():
        if len(fitting) >= gang.size:
            best = sorted(fitting, key=lambda n: (n.rank(need), n.offer.name))[: gang.size]
            choices.append((max(n.rank(need) for n in best), group, best))
    if not choices:
        return Unplaced(gang.key, _reasons(gang, states, groups))
    _, _, chosen = min(choices, key=lambda choice: choice[:2])
    members = tuple(Placed(gang.key, node.offer.name, node.take(need)) for node in chosen)
    return GangPlaced(gang.key, members)


def _reasons(
    gang: Gang, states: list[NodeState], groups: dict[str, list[NodeState]]
) -> dict[str, str]:
    """Each node's reason: what keeps a member off it, or that too few of its group's nodes
    take one."""
    reasons = {}
    for node in states:
        why = node.why_not(gang.member)
        if not why:
            group = node.offer.labels.get(GROUP_LABEL, "")
            where = f"in resource group {group}" if group else "with no resource group"
            found = len(groups.get(group, ()))
            why = (
                f"takes a member, but the instance spans {gang.size} nodes (one member each) "
                f"and only {found} {where} take one"
            )
        reasons[node.offer.name] = why
    return reasons
