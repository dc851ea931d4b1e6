"""Rank tables of a prefill/decode-separated vLLM on Ascend NPUs (ModelArts' form, seeds/000).

The global table lists every instance in three groups: "0" the scheduler (the router; in
Wharf the gateway), "1" the prefill instances, "2" the decode instances. Each instance also
reads a local table: its own entry of the global one, as group "0". Within an instance,
`rank_id` is the logical card number (0, 1, ...) and `device_id` the physical one; a card's
`device_ip` is its RoCE address, which only the node itself can read (`hccn_tool`).
NODE_PORTS lists the instances' serving ports in the global table's order.

An instance across hosts (unit.size N > 1) is N servers of its group, one per member (gang
rank), each with its own node address and cards; `rank_id` continues across them (member r's
cards are r*cards, r*cards+1, ...), as an HCCL rank table numbers one communication world
spread over several machines (one `server_list` with every machine, `server_count` their
number, each `rank_id` unique in the table: MindSpore's "rank table startup",
mindspore.cn/docs/en/r2.5.0/model_train/parallel/rank_table.html). Every member reads the
same local table, its instance's servers, so the engine's HCCL world is the instance's cards
(neither source below documents a local table for an instance across machines: this is
Wharf's reading). NODE_PORTS lists only the leaders' serving ports: only leaders serve HTTP.

What the sources say (read 2026-11-29):
- This form (GLOBAL_RANK_TABLE_FILE_PATH, RANK_TABLE_FILE_PATH, NODE_PORTS, groups "0"/"1"/"2")
  is ModelArts' (AscendCloud-LLM's vLLM, seeds/000): its tool writes one global table per
  machine and merges the machines' tables (`pd_ranktable_tools.py --mode merge`) when the
  instances are on several machines; the local table must match the instance's global entry.
  It documents instances on one machine only; the multi-server numbering above is HCCL's.
- vLLM-Ascend never read these variables. Its own rank-table deployment
  (LLMDataDistCMgrConnector, examples/disaggregated_prefill_v1/{README.md,gen_ranktable.sh,
  gen_ranktable.py} in github.com/vllm-project/vllm-ascend, removed in #4780, 2025-12) wrote one
  file for all nodes, DISAGGREGATED_PREFILL_RANK_TABLE_PATH: version "1.2", flat
  `prefill_device_list`/`decode_device_list` of {server_id, device_id, device_ip, cluster_id},
  gathered over gloo with torchrun across the nodes; each worker takes its entries by its own
  address (server_id) and TP rank. Its prefill instance over two nodes ran as one data-parallel
  vLLM (`--headless --data-parallel-start-rank 1` on the second node), every node with
  HCCL_IF_IP (the node's address), GLOO_SOCKET_IFNAME, TP_SOCKET_IFNAME and HCCL_SOCKET_IFNAME
  (its NIC) and VLLM_ASCEND_LLMDD_RPC_PORT. Its current multi-node guide
  (docs/source/tutorials/features/pd_disaggregation_mooncake_multi_node.md) uses the Mooncake
  connector, with no rank table, and the same four variables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from contracts.engines.plan import PdMember

__all__ = [
    "PdMember",
    "device_ip_placeholder",
    "global_rank_table",
    "instance_of",
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
    """The global table's order: prefill instances, then decode, each by index, each
    instance's members by rank."""
    return sorted(members, key=lambda m: (GROUPS[m.role], m.index, m.rank))


def instance_of(members: Iterable[PdMember], member: PdMember) -> list[PdMember]:
    """The members of `member`'s instance, by rank (just `member` where the layout lacks it)."""
    own = [m for m in ordered(members) if (m.role, m.index) == (member.role, member.index)]
    return own if any(m.rank == member.rank for m in own) else [member]


def _devices(member: PdMember) -> list[dict[str, str]]:
    ips = dict(zip(member.device_ids, member.device_ips, strict=False))
    return [
        {
            "device_id": str(device),
            "device_ip": ips.get(device) or device_ip_placeholder(device),
            "rank_id": str(rank),
        }
        for rank, device in enumerate(member.device_ids, start=member.rank * len(member.device_ids))
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


def local_rank_table(*servers: PdMember) -> dict[str, Any]:
    """One instance's own entry (its members' servers, by rank); ModelArts numbers its group
    "0" whatever its role."""
    listed = sorted(servers, key=lambda m: m.rank)
    return {"version": VERSION, "status": "completed", **_group("0", [_server(m) for m in listed])}


def node_ports(members: Iterable[PdMember]) -> str:
    """The instances' serving ports in the global table's order: their leaders'."""
    return ",".join(str(m.port) for m in ordered(members) if m.rank == 0)


def _free_cards(count: int, taken: set[int]) -> tuple[int, ...]:
    cards: list[int] = []
    card = 0
    while len(cards) < count:
        if card not in taken:
            cards.append(card)
        card += 1
    taken.update(cards)
    return tuple(cards)


def preview_layout(
    instances: Mapping[str, tuple[int, int]], own: PdMember, hosts: Sequence[str] = ()
) -> tuple[PdMember, ...]:
    """A layout for when the worker has not placed the service yet (the preview): `instances`
    maps each role to (instances, cards each); `own` keeps its place and cards, and the other
    instances take the lowest free cards on the same node, prefill first, like seeds/000.
    `hosts`: for instances across hosts, each member rank's node address (member r of every
    instance on node r, own's instance on the same cards on each, as placement gives a gang
    same-size card sets), so every member's preview shows the same tables; () for instances
    on one host (own's)."""
    addresses = tuple(hosts) or (own.host_ip,)
    taken = [set(own.device_ids) for _ in addresses]
    members: list[PdMember] = []
    for role in GROUPS:
        count, cards = instances.get(role, (0, 0))
        for index in range(count):
            mine = (role, index) == (own.role, own.index) and bool(own.device_ids)
            for rank, host in enumerate(addresses):
                if mine and rank == own.rank:
                    members.append(own)
                    continue
                devices = own.device_ids if mine else _free_cards(cards, taken[rank])
                members.append(replace(
                    own, role=role, index=index, rank=rank, host_ip=host, device_ids=devices,
                    device_ips=(),
                ))  # fmt: skip
    return tuple(members)
