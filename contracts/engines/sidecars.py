"""An instance's other containers (EAS's multi-container services): `containers[1:]` beside the
main container, `containers[0]`, as the containers of one Kubernetes pod. Pure.

What they share and what they do not (the README's "Several containers in one instance"):
- the network: one namespace (Docker: the main container's; a pod's; a local process: the
  node's), so each reaches the others on localhost; the main container's port takes traffic;
- their life: created after the main container, removed with it; one that exits fails the
  whole instance, which restarts with the usual back-off;
- the spec's storage[] mounts (object storage, NFS, git, image folders); not the engine's
  model, its cards, its shared-memory size nor its probes;
- resources: metadata.cpu, memory and the cards bound the main container, as they bound a
  one-container instance; each other container runs under the operator's defaults for an
  instance without cards (WHARF_DEFAULT_CPUS, WHARF_DEFAULT_MEMORY_MB, WHARF_PIDS_LIMIT).
"""

from __future__ import annotations

from dataclasses import replace

from contracts.engine_front import front_port
from contracts.engines.plan import ContainerPlan, Mount, SidecarPlan
from contracts.limits import TenantLimits, capped
from contracts.spec import Container, ServiceSpec


def with_sidecars(
    spec: ServiceSpec, plan: ContainerPlan, storage: list[Mount], limits: TenantLimits
) -> ContainerPlan:
    """`plan` with a SidecarPlan for each of the spec's other containers, which see the
    instance's `storage` mounts (contracts.engines.storage_mounts)."""
    sidecars = [sidecar(i, c, storage, limits) for i, c in enumerate(spec.containers) if i]
    return replace(plan, sidecars=sidecars) if sidecars else plan


def sidecar(index: int, container: Container, storage: list[Mount], limits: TenantLimits):
    """containers[index] as a sidecar: its command or script as a shell line (none: its
    image's entrypoint), its own env, the operator's bounds for an instance without cards."""
    shell = container.command or container.script
    return SidecarPlan(
        index=index,
        image=container.image or "",  # required (contracts.spec_sidecars)
        args=["/bin/sh", "-c", shell] if shell else [],
        port=container.port,
        env={e.name: e.value for e in container.env},
        mounts=[capped(m, limits.memory_empty_dir_bytes) for m in storage],
        cpus=limits.default_cpus(0),
        memory_bytes=limits.default_memory_bytes(0),
        pids_limit=limits.default_pids(0),
    )


def sidecar_errors(spec: ServiceSpec, main_port: int) -> dict[str, list[str]]:
    """The other containers' ports beside the main container's (`main_port`, the engine's
    default where containers[0] names none): one namespace, so each port is one container's,
    and the engine's front (gateway.front) has its own there."""
    taken = {main_port: "containers[0]", front_port(main_port): "the engine's front"}
    errors: dict[str, list[str]] = {}
    for i, container in enumerate(spec.containers):
        if i == 0 or container.port is None:
            continue
        if container.port in taken:
            errors[f"containers[{i}].port"] = [
                f"port {container.port} is {taken[container.port]}'s: the containers of an "
                "instance share one network, so each listens on a port of its own"
            ]
        else:
            taken[container.port] = f"containers[{i}]"
    return errors
