"""Instances across hosts (the spec's unit.size N > 1) as rows: one row per member, on its
own node, sharing `gang` (the leader's name) and numbered by `rank` (0: the leader, which
serves HTTP and holds the rendezvous port). workers.scheduling.gang decides where the members go;
this module records them, counts a gang as one instance for the rollout planner, and keeps its
failure whole: a member that ends puts every member into back-off together, and a member
whose node stops answering gives the whole instance up, to be placed again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from datetime import datetime

from contracts.allocation import encode_allocation
from contracts.engines.plan import GangMember, Placement
from contracts.spec import ServiceSpec
from contracts.spec_facts import card_need
from controlplane.nodes.models import Node
from controlplane.nodes.state import NOT_READY
from controlplane.services.choices import InstanceState
from controlplane.services.events import record, record_once
from controlplane.services.models import Instance, Service
from workers.scheduling import gang, placement, rollout

# Worse first: a member in one of these makes its gang's state (a running member stays
# `starting`: only the leader is probed, so the gang is as ready as its leader).
_WORST = (
    InstanceState.DRAINING,
    InstanceState.FAILED,
    InstanceState.BACKOFF,
    InstanceState.UNKNOWN,
    InstanceState.CREATING,
)
RUNNING = (InstanceState.STARTING, InstanceState.READY)


def unit_of(row: Instance) -> str:
    """The name the instance a row belongs to goes by: its gang's (the leader's), or its own."""
    return row.gang or row.name


def by_unit(rows: Sequence[Instance]) -> dict[str, list[Instance]]:
    """Rows grouped per instance, members in rank order."""
    units: dict[str, list[Instance]] = defaultdict(list)
    for row in rows:
        units[unit_of(row)].append(row)
    return {name: sorted(members, key=lambda r: r.rank) for name, members in units.items()}


def unit_state(members: Sequence[Instance]) -> str:
    """A gang's state: its worst member's where one is not running, else its leader's."""
    for state in _WORST:
        if any(m.state == state for m in members):
            return state
    return members[0].state


def as_rollout_members(rows: Sequence[Instance], draining_nodes: set[str]) -> list[rollout.Member]:
    """One rollout member per instance: a gang counts once, movable when any of its nodes
    drains (the whole group moves), failing when any member fails."""
    found = []
    for name, members in by_unit(rows).items():
        state = unit_state(members)
        failing = next(
            (m.message for m in members
             if m.state in (InstanceState.BACKOFF, InstanceState.FAILED)), ""
        )  # fmt: skip
        found.append(rollout.Member(
            name=name, spec_hash=members[0].spec_hash, state=state,
            movable=any(m.node in draining_nodes for m in members), failing=failing,
        ))  # fmt: skip
    return found


def half_drained(rows: Sequence[Instance]) -> list[Instance]:
    """The members not yet draining of gangs with a member draining (one deleted through the
    API, say): a gang drains whole."""
    return [
        m for members in by_unit(rows).values()
        if any(m.state == InstanceState.DRAINING for m in members)
        for m in members if m.state != InstanceState.DRAINING
    ]  # fmt: skip


def place(
    service: Service,
    spec: ServiceSpec,
    roles: list[str],
    needs: list[placement.Need],
    offers: list[placement.NodeOffer],
    held: list[placement.Held],
    target: str,
    track: str,
    ports: Callable[[str, int], tuple[int, ...] | None],
    index: Callable[[str], int],
) -> tuple[set[str], str]:
    """Place one gang of unit.size members per entry of `roles` (under the placement lock)
    and record each member as a row; the first that does not fit whole leaves its instance
    pending, with every node's reason. The leader's node gives the rendezvous port (and a
    prefill/decode leader its serving and KV ports) from its port range."""
    size = spec.unit_size()
    gangs = [gang.Gang(need, size) for need in needs]
    woken: set[str] = set()
    taken: dict[str, int] = defaultdict(int)
    for role, result in zip(roles, gang.place_gangs(gangs, offers, held), strict=True):
        if isinstance(result, placement.Unplaced):
            waiting = result.message()
            record_once(service, "InsufficientResources", f"no node fits: {waiting}")
            return woken, waiting
        leader = result.leader
        found = ports(leader.node, 3 if role else 1)
        if found is None:
            waiting = f"{leader.node}: no free port in WHARF_PD_PORTS"
            record_once(service, "InsufficientResources", f"no node fits: {waiting}")
            return woken, waiting
        master, *served = found
        kind, _ = card_need(spec, role)
        pd_index = index(role) + taken[role]
        taken[role] += 1
        for rank, member in enumerate(result.members):
            name = result.key if rank == 0 else f"{result.key}-{rank}"
            Instance.objects.create(
                service=service, name=name, role=role, pd_index=pd_index, runtime="",
                node=member.node, spec_hash=target, state=InstanceState.CREATING, track=track,
                devices=encode_allocation(kind, member.cards) if member.cards else "",
                gang=result.key, rank=rank, master_port=master if rank == 0 else None,
                port=served[0] if served and rank == 0 else None,
                kv_port=served[1] if served and rank == 0 else None,
            )  # fmt: skip
            cards = f" ({kind}:{','.join(map(str, member.cards))})" if member.cards else ""
            record(service, "InstanceCreated", f"placed on node {member.node}{cards} as member "
                   f"{rank} of {size} of {result.key}", name)  # fmt: skip
            woken.add(member.node)
    return woken, ""


def held_ports(node: str) -> list[int]:
    """The ports the rows on `node` hold: serving, KV side channel, rendezvous."""
    rows = Instance.objects.filter(node=node).values_list("port", "kv_port", "master_port")
    return [port for ports in rows for port in ports if port]


def give_up_broken(
    service: Service,
    rows: list[Instance],
    states: dict[str, str],
    nodes: Collection[str],
    evicted: set[str],
) -> set[str]:
    """A gang with a member on a node that stopped answering (or is gone) is given up whole:
    its rows go at once (out of routing; the live members' agents remove what they run as no
    longer assigned) and the scheduler places the instance again. A draining gang's members
    go only from nodes gone or past the eviction grace (a drain stays a drain). The names of
    the rows removed. `rows`: the service's members (rows with a gang) that have not
    succeeded."""
    gone: set[str] = set()
    for name, members in by_unit(rows).items():
        lost = [m for m in members if m.node not in nodes or m.node in evicted]
        if any(m.state == InstanceState.DRAINING for m in members):
            Instance.objects.filter(pk__in=[m.pk for m in lost]).delete()
            gone |= {m.name for m in lost}
            continue
        broken = lost or [m for m in members if states.get(m.node) == NOT_READY]
        if not broken:
            continue
        first = broken[0]
        record(service, "InstanceLost", f"member {first.rank} on node {first.node} stopped "
               f"answering; the whole instance of {len(members)} members is placed again",
               name)  # fmt: skip
        Instance.objects.filter(gang=name).delete()
        gone |= {m.name for m in members}
    return gone


def fail_together(row: Instance, restarts: int, restart_at: datetime, why: str) -> set[str]:
    """Every other member of `row`'s gang into back-off with it, restarting at the same time
    (their agents stop what they run); the nodes to wake."""
    if not row.gang:
        return set()
    others = (Instance.objects.filter(gang=row.gang).exclude(pk=row.pk)
              .exclude(state__in=(InstanceState.DRAINING, InstanceState.FAILED)))  # fmt: skip
    nodes = set(others.values_list("node", flat=True))
    message = (f"member {row.rank} ({row.name}, node {row.node}) {why}; the whole instance "
               "restarts")  # fmt: skip
    if others.update(state=InstanceState.BACKOFF, restarts=restarts, restart_at=restart_at,
                     message=message, url="", ready_since=None, probe_failures=0,
                     probe_successes=0, liveness_failures=0, probed_at=None):  # fmt: skip
        record(row.service, "GangRestarting", message, row.gang)
    return nodes


def fail_all(row: Instance, message: str) -> None:
    """Every other member of `row`'s gang fails with it (a member that cannot start, or one
    kept as it crashed): their agents stop what they still run."""
    if not row.gang:
        return
    others = (Instance.objects.filter(gang=row.gang).exclude(pk=row.pk)
              .exclude(state__in=(InstanceState.DRAINING, InstanceState.FAILED)))  # fmt: skip
    why = f"member {row.rank} ({row.name}, node {row.node}) failed: {message}"
    if others.update(state=InstanceState.FAILED, message=why[:2000], url="", ready_since=None):
        record(row.service, "InstanceFailed", why, row.gang)


def stop_member(row: Instance, runtime) -> set[str]:
    """A member put into back-off by another's end: what it runs stops now, to start again
    with the others."""
    runtime.remove(row.name)
    return {row.service.name}


def member_placement(placement_: Placement, row: Instance, spec: ServiceSpec) -> Placement:
    """A member's wiring: its rank, the leader's node address and rendezvous port, and its own
    node's address (where the other members reach it: VLLM_HOST_IP, not the HTTP listener,
    which stays the runtime's own, behind its front on the process runtime)."""
    leader = Instance.objects.filter(gang=row.gang, rank=0).first()
    names = {row.node, leader.node if leader else ""}
    addresses = dict(Node.objects.filter(name__in=names).values_list("name", "address"))
    own = addresses.get(row.node) or placement_.host
    member = GangMember(
        rank=row.rank, size=spec.unit_size(),
        leader_ip=addresses.get(leader.node, "") if leader else "",
        port=(leader.master_port or 0) if leader else 0, ip=own,
    )  # fmt: skip
    return replace(placement_, gang=member)
