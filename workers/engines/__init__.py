"""Engine adapters: pure functions from a service spec to a container plan."""

from __future__ import annotations

from controlplane.services.spec import ServiceSpec
from workers.engines import custom, vllm
from workers.engines.plan import ContainerPlan, Mount, Placement

__all__ = ["ContainerPlan", "Mount", "Placement", "render"]

GB = 1024**3
MB = 1024**2


def render(spec: ServiceSpec, placement: Placement | None = None) -> ContainerPlan:
    """The container of one instance of `spec`: the engine's command, or the user's verbatim."""
    placement = placement or Placement()
    container = spec.containers[0] if spec.containers else None
    if spec.llm and not (container and (container.command or container.script)):
        plan = vllm.render(spec, placement)
    else:
        plan = custom.render(spec, placement)
    return _with_resources(spec, plan)


def _with_resources(spec: ServiceSpec, plan: ContainerPlan) -> ContainerPlan:
    meta = spec.metadata
    mounts = list(plan.mounts)
    shm = meta.shm_size * GB if meta.shm_size else plan.shm_size_bytes
    for entry in spec.storage:
        if entry.empty_dir is None:
            continue
        size = entry.empty_dir.size_limit * GB if entry.empty_dir.size_limit else None
        if entry.mount_path.rstrip("/") == "/dev/shm":
            shm = size or shm
        elif entry.empty_dir.medium == "memory":
            mounts.append(
                Mount(kind="tmpfs", target=entry.mount_path, size_bytes=size, read_only=False)
            )
    return ContainerPlan(
        image=plan.image,
        args=plan.args,
        port=plan.port,
        env=plan.env,
        mounts=mounts,
        health_path=plan.health_path,
        metrics_path=plan.metrics_path,
        shm_size_bytes=shm,
        cpus=meta.cpu,
        memory_bytes=meta.memory * MB if meta.memory else None,
    )
