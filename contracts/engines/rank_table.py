"""Rank tables of a prefill/decode-separated vLLM on Ascend NPUs (ModelArts' form, seeds/000).

The global table lists every instance in three groups: "0" the scheduler (the router; in
Wharf the gateway), "1" the prefill instances, "2" the decode instances. Each instance also
reads a local table: its own entry of the global one, as group "0". Within an instance,
`rank_id` is the logical card number (0, 1, ...) and `device_id` the physical one; a card's
`device_ip` is its RoCE address, which only the node itself can read (`hccn_tool`).
NODE_PORTS lists the instances' serving ports in the global table's order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from contracts.engines.plan import PdMember

__all__ = [
    "PdMember",
    "device_ip_placeholder",
    "global_rank_table",
    "local_rank_table",
    "node_ports",
    "ordered",
    "preview_layout",
    "with_device_ips",
]

VERSION = "1.0"
GROUPS = {"prefill": "1", "decode": "2"}


def device_ip_placeholder(device_id: int) -> str:
    """Shown where a card's address is not known yet (the preview): how to read it on the node.
    The engine rejects it, so a table with one never passes for a working one."""
    return f"<hccn_tool -i {device_id} -ip -g>"


def with_device_ips(
    members: Iterable[PdMember], host_ip: str, device_ips: Mapping[int, str]
) -> tuple[PdMember, ...]:
    """Fills in the card addresses one node read (`hccn_tool`: device id -> ip) on the
    members that run on that node; other nodes' members are left as they are."""
    return tuple(
        replace(m, device_ips=tuple(device_ips.get(d, "") for d in m.device_ids))
        if m.host_ip == host_ip
        else m
        for m in members
    )


def ordered(members: Iterable[PdMember]) -> list[PdMember]:
    """The global table's order: prefill instances, then decode, each by index."""
    return sorted(members, key=lambda m: (GROUPS[m.role], m.index))


def _devices(member: PdMember) -> list[dict[str, str]]:
    ips = dict(zip(member.device_ids, member.device_ips, strict=False))
    return [
        {
            "device_id": str(device),
            "device_ip": ips.get(device) or device_ip_placeholder(device),
            "rank_id": str(rank),
        }
        for rank, device in enumerate(member.device_ids)
    ]


def _server(member: PdMember) -> dict[str, Any]:
    return {"server_id": member.host_ip, "server_ip": member.host_ip, "device": _devices(member)}


def _group(group_id: str, servers: list[dict[str, Any]]) -> dict[str, Any]:
    return {"group_id": group_id, "server_count": str(len(servers)), "server_list": servers}


def global_rank_table(members: Iterable[PdMember], scheduler_ip: str) -> dict[str, Any]:
    listed = ordered(members)
    groups = [_group("0", [{"server_id": scheduler_ip, "server_ip": scheduler_ip}])]
    for role, group_id in GROUPS.items():
        groups.append(_group(group_id, [_server(m) for m in listed if m.role == role]))
    return {"version": VERSION, "status": "completed", "server_group_list": groups}


def local_rank_table(member: PdMember) -> dict[str, Any]:
    """One instance's own entry; ModelArts numbers its group "0" whatever its role."""
    return {"version": VERSION, "status": "completed", **_group("0", [_server(member)])}


def node_ports(members: Iterable[PdMember]) -> str:
    return ",".join(str(m.port) for m in ordered(members))


def _free_cards(count: int, taken: set[int]) -> tuple[int, ...]:
    cards: list[int] = []
    card = 0
    while len(cards) < count:
        if card not in taken:
            cards.append(card)
        card += 1
    taken.update(cards)
    return tuple(cards)


def preview_layout(instances: Mapping[str, tuple[int, int]], own: PdMember) -> tuple[PdMember, ...]:
    """A layout for when the worker has not placed the service yet (the preview): `instances`
    maps each role to (instances, cards each); `own` keeps its place and cards, and the other
    instances take the lowest free cards on the same node, prefill first, like seeds/000."""
    taken = set(own.device_ids)
    members: list[PdMember] = []
    for role in GROUPS:
        count, cards = instances.get(role, (0, 0))
        for index in range(count):
            if (role, index) == (own.role, own.index) and own.device_ids:
                members.append(own)
                continue
            devices = _free_cards(cards, taken)
            members.append(replace(own, role=role, index=index, device_ids=devices, device_ips=()))
    return tuple(members)
