"""The engine container's probes on Kubernetes, run by the kubelet (which reaches the pod's
own ports, inside its network namespace, without the front). Pure.

From Wharf's health_check: readiness, a startup probe that gives a new pod
startup_timeout_seconds (KubeSettings.health_timeout_s) to pass it before the kubelet restarts
it, and liveness when given. From EAS's container probes (contracts.spec_probes): each as
Kubernetes has it, since EAS's are Kubernetes' (http_get on the serving port becomes the
engine's named port; exec is an exec probe in the engine container; with no readiness probe
of the container's, the engine's own health path decides readiness, as on a node).
"""

from __future__ import annotations

import math

from contracts.engines.plan import ContainerPlan
from contracts.kube.front import ENGINE_PORT
from contracts.kube.names import KubeSettings
from contracts.spec import ServiceSpec
from contracts.spec_probes import ContainerProbe

KINDS = {"startup_check": "startupProbe", "liveness_check": "livenessProbe",
         "readiness_check": "readinessProbe", "health_check": "readinessProbe"}  # fmt: skip


def check(path: str) -> dict:
    """An HTTP GET of `path` on the engine's port; a TCP connect where the engine has no path."""
    port = ENGINE_PORT
    return {"httpGet": {"path": path, "port": port}} if path else {"tcpSocket": {"port": port}}


def probes(spec: ServiceSpec, plan: ContainerPlan, settings: KubeSettings) -> dict:
    """The engine container's probes: EAS's container probes where the spec has them, else
    Wharf's health_check."""
    container = spec.containers[0] if spec.containers else None
    if container is not None and container.probes():
        found = {
            KINDS[name]: container_probe(probe, container.port)
            for name in KINDS
            if (probe := getattr(container, name)) is not None
        }
        # No readiness probe of its own: the engine's health, as on a node (workers.nodes.probes).
        found.setdefault("readinessProbe", {**check(plan.health_path), "periodSeconds": 5})
        return found
    hc = spec.health_check
    path = hc.path or plan.health_path
    budget = (hc.startup_timeout_seconds or settings.health_timeout_s) - hc.initial_delay_seconds
    found = {
        "readinessProbe": {
            **check(path), "periodSeconds": hc.period_seconds,
            "timeoutSeconds": hc.timeout_seconds, "failureThreshold": hc.failure_threshold,
            "successThreshold": hc.success_threshold,
        },
        "startupProbe": {
            **check(path), "initialDelaySeconds": hc.initial_delay_seconds,
            "periodSeconds": hc.period_seconds, "timeoutSeconds": hc.timeout_seconds,
            "failureThreshold": max(1, math.ceil(budget / hc.period_seconds)),
            "successThreshold": 1,
        },
    }  # fmt: skip
    if live := hc.liveness:
        found["livenessProbe"] = {
            **check(live.path or plan.health_path),
            "initialDelaySeconds": live.initial_delay_seconds,
            "periodSeconds": live.period_seconds, "timeoutSeconds": live.timeout_seconds,
            "failureThreshold": live.failure_threshold, "successThreshold": 1,
        }  # fmt: skip
    return found


def container_probe(probe: ContainerProbe, served: int | None) -> dict:
    """One of EAS's probes as a Kubernetes probe; its serving port by the engine's port name."""
    if probe.http_get is not None:
        port = ENGINE_PORT if probe.http_get.port == served else probe.http_get.port
        action: dict = {"httpGet": {"path": probe.http_get.path, "port": port}}
    elif probe.tcp_socket is not None:
        port = ENGINE_PORT if probe.tcp_socket.port == served else probe.tcp_socket.port
        action = {"tcpSocket": {"port": port}}
    else:
        assert probe.exec is not None  # ContainerProbe has exactly one action
        action = {"exec": {"command": list(probe.exec.command)}}
    return {
        **action, "initialDelaySeconds": probe.initial_delay_seconds,
        "periodSeconds": probe.period_seconds, "timeoutSeconds": probe.timeout_seconds,
        "failureThreshold": probe.failure_threshold, "successThreshold": probe.success_threshold,
    }  # fmt: skip
