"""A user's own image and command, run as given (EAS's custom deployment)."""

from __future__ import annotations

from controlplane.services.spec import ServiceSpec
from workers.engines.plan import ContainerPlan, Placement

DEFAULT_PORT = 8000


def render(spec: ServiceSpec, placement: Placement) -> ContainerPlan:
    container = spec.containers[0]
    shell = container.command or container.script or ""
    port = container.port or DEFAULT_PORT
    env = {e.name: e.value for e in container.env}
    # The command is a shell line in EAS's format; PORT tells a process-runtime instance which
    # port it was given when the spec's own port cannot be used.
    env.setdefault("PORT", str(placement.port or port))
    return ContainerPlan(
        image=container.image or "",
        args=["/bin/sh", "-c", shell],
        port=placement.port or port,
        env=env,
        health_path="",  # unknown for a custom server: a TCP check
        metrics_path=None,
    )
