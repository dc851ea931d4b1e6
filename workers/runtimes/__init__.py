"""Runtime drivers: where instances run (Docker containers or local processes)."""

from __future__ import annotations

import functools

from django.conf import settings

from contracts import engine_tls
from controlplane.limits import tenant_limits
from workers.runtimes.base import InstanceError, InstanceRequest, ObservedInstance, Runtime

__all__ = ["InstanceRequest", "ObservedInstance", "Runtime", "InstanceError", "get_runtime"]


@functools.cache
def get_runtime() -> Runtime:
    """WHARF_RUNTIME, or Docker when a daemon answers, else local processes."""
    from workers.runtimes.docker import DockerRuntime
    from workers.runtimes.process import ProcessRuntime

    choice = settings.WHARF_RUNTIME or ("docker" if DockerRuntime.available() else "process")
    if choice == "docker":
        return DockerRuntime(
            str(settings.WHARF_MODEL_DIR), settings.WHARF_NODE_ADDRESS,
            settings.WHARF_INSTANCE_LOG_DIR, node=settings.WHARF_NODE_NAME,
            limits=tenant_limits(), front_image=settings.WHARF_FRONT_IMAGE,
            metrics_token=settings.WHARF_ENGINE_METRICS_TOKEN, tls=engine_tls.node_tls(),
        )  # fmt: skip
    if choice == "process":
        return ProcessRuntime(
            str(settings.WHARF_MODEL_DIR), settings.WHARF_INSTANCE_LOG_DIR,
            settings.WHARF_VLLM_VENV, node_address=settings.WHARF_NODE_ADDRESS,
            node=settings.WHARF_NODE_NAME, metrics_token=settings.WHARF_ENGINE_METRICS_TOKEN,
            tls=engine_tls.node_tls(),
        )  # fmt: skip
    if choice == "kubernetes":  # no node runtime: workers.kube reconciles on the cluster
        raise ValueError("WHARF_RUNTIME=kubernetes runs no instance on this host")
    raise ValueError(f"WHARF_RUNTIME={choice!r}: use docker, process or kubernetes")
