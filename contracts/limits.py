"""The bounds every tenant instance runs under, whatever its spec says.

A spec is a tenant's request to shared machinery, so no instance runs unbounded: its memory
and CPU are the spec's `metadata.memory` and `metadata.cpu`, else the operator's defaults; its
number of tasks (processes and threads) is the operator's; a memory-backed mount is never
larger than the operator's cap; it gains no privilege (no setuid) and holds no capability but
those its plan needs. Kubernetes' Pod Security Standards (`restricted`) are the model. Pure:
contracts.engines.render puts the numbers in the plan; the Docker runtime and the pod template
render them (workers.runtimes.docker.run_options, contracts.kube.pod_template).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # contracts.engines.plan imports this module
    from contracts.engines.plan import ContainerPlan, Mount
    from contracts.spec import ServiceSpec

MIB = 1024**2
SHM = "/dev/shm"  # shared memory: sized by metadata.shm_size, not a memory empty_dir


@dataclass(frozen=True)
class TenantLimits:
    """The operator's defaults (the README's table). Each is per card the instance holds, and
    an instance without cards counts once: a tensor-parallel engine runs a worker per card,
    each with its own host memory, CPU and threads."""

    memory_mb: int = 16384  # WHARF_DEFAULT_MEMORY_MB
    cpus: float = 8.0  # WHARF_DEFAULT_CPUS
    # WHARF_PIDS_LIMIT. vLLM's threads count (a tiny model's CPU engine has 75 tasks on two
    # cores; its thread pools grow with the host's cores).
    pids: int = 4096
    memory_empty_dir_mb: int = 8192  # WHARF_MEMORY_EMPTY_DIR_MAX_MB, not per card
    # The most CPUs a default may name on this node: dockerd refuses a limit above the host's
    # count. None where the node is not known when rendering (a pod may land on any node).
    node_cpus: int | None = None

    def __post_init__(self) -> None:
        for name in ("memory_mb", "cpus", "pids", "memory_empty_dir_mb"):
            if not getattr(self, name) > 0:
                raise ValueError(f"TenantLimits.{name} must be positive")

    def default_memory_bytes(self, cards: int) -> int:
        return self.memory_mb * MIB * max(1, cards)

    def default_cpus(self, cards: int) -> float:
        cpus = self.cpus * max(1, cards)
        return min(cpus, self.node_cpus) if self.node_cpus else cpus

    def default_pids(self, cards: int) -> int:
        return self.pids * max(1, cards)

    @property
    def memory_empty_dir_bytes(self) -> int:
        return self.memory_empty_dir_mb * MIB


def bounded(
    plan: ContainerPlan, spec: ServiceSpec, cards: int, limits: TenantLimits
) -> ContainerPlan:
    """`plan` with its memory, CPU and pids limits (the spec's, else `limits`' for an instance
    holding `cards` cards) and every memory-backed mount sized, at most at the cap."""
    meta = spec.metadata
    asked = meta.memory * MIB if meta.memory else None
    return filled(replace(plan, cpus=meta.cpu, memory_bytes=asked), cards, limits)


def filled(plan: ContainerPlan, cards: int, limits: TenantLimits) -> ContainerPlan:
    """`plan` with the limits it names, `limits`' defaults for those it does not, and its
    memory-backed mounts capped. A rendered plan names them all; a runtime fills any plan it is
    given, so that nothing it creates runs unbounded."""
    return replace(
        plan,
        cpus=plan.cpus or limits.default_cpus(cards),
        memory_bytes=plan.memory_bytes or limits.default_memory_bytes(cards),
        pids_limit=plan.pids_limit or limits.default_pids(cards),
        mounts=[capped(m, limits.memory_empty_dir_bytes) for m in plan.mounts],
    )


def capped(mount: Mount, cap: int) -> Mount:
    """A memory-backed mount (tmpfs) of at most `cap` bytes, `cap` where it names no size. The
    API refuses a spec that asks more; one saved before the cap was lowered gets the cap."""
    if mount.kind != "tmpfs":
        return mount
    return replace(mount, size_bytes=min(mount.size_bytes or cap, cap))


def limit_errors(spec: ServiceSpec, limits: TenantLimits) -> dict[str, list[str]]:
    """{field: [why]} for what `spec` asks beyond the operator's caps."""
    cap = limits.memory_empty_dir_mb
    errors = {}
    for i, entry in enumerate(spec.storage):
        scratch = entry.empty_dir
        if scratch is None or scratch.medium != "memory" or not scratch.size_limit:
            continue
        if entry.mount_path.rstrip("/") != SHM and scratch.size_limit * 1024 > cap:
            errors[f"storage[{i}].empty_dir.size_limit"] = [
                f"{scratch.size_limit} GB is more than a memory empty_dir may have here "
                f"({cap} MB, the operator's WHARF_MEMORY_EMPTY_DIR_MAX_MB): ask less, leave "
                f'size_limit out for {cap} MB, or use a disk empty_dir (medium "")'
            ]
    return errors


# Capabilities a plan needs, by the host devices it passes in (a prefix of their paths): RDMA
# registers (pins) memory, which takes CAP_IPC_LOCK beyond RLIMIT_MEMLOCK (NVIDIA's GPUDirect
# RDMA containers run with it). No engine adapter passes such a device yet.
DEVICE_CAPABILITIES = {"/dev/infiniband/": "IPC_LOCK"}
# Binding a port below this takes NET_BIND_SERVICE. Docker's bridge networks lower the bound
# to 0 themselves; a pod's network namespace need not.
PRIVILEGED_PORTS = 1024


def granted_capabilities(plan: ContainerPlan) -> tuple[str, ...]:
    """The capabilities an instance of `plan` keeps; every other one is dropped. vLLM's CPU
    engine needs none (tests/test_docker_limits.py runs it); the NVIDIA runtime sets cards up
    from outside the container. This is where a grant an operator decides would join them."""
    granted = {
        capability
        for prefix, capability in DEVICE_CAPABILITIES.items()
        for path in plan.device_paths
        if path.startswith(prefix)
    }
    if plan.port < PRIVILEGED_PORTS:
        granted.add("NET_BIND_SERVICE")
    return tuple(sorted(granted))
