"""An engine pod's front (gateway.front): a second container in the pod, from Wharf's image,
which owns the pod's `http` port (where the gateways call, found by workers.kube.observe) and
lets in only the engine key, read from the service's Secret. The engine's own port is named
`engine`: the kubelet probes it there; its peers reach it through the NetworkPolicy."""

from __future__ import annotations

from contracts.engine_front import KEY_ENV, METRICS_TOKEN_ENV, front_port
from contracts.engines.plan import ContainerPlan
from contracts.kube.names import KubeSettings

FRONT = "front"  # the container's name
HTTP = "http"  # the pod's serving port's name: the front's
ENGINE_PORT = "engine"  # the engine container's own port's name
METRICS_TOKEN = "engine-metrics-token"  # its entry in the service's Secret, where set


def front_container(
    plan: ContainerPlan, settings: KubeSettings, secret: str, key: str, security: dict
) -> dict:
    """The front of the engine of `plan`: its key (entry `key` of Secret `secret`) and the
    metrics token by reference only; small bounds; `security` (the restricted profile), with
    nothing it may write."""
    port = front_port(plan.port)
    args = ["python", "-m", "gateway.front", "--listen", f"0.0.0.0:{port}",
            "--upstream", f"127.0.0.1:{plan.port}"]  # fmt: skip
    if plan.metrics_path:
        args += ["--metrics-path", "/" + plan.metrics_path.lstrip("/")]
    env = [{"name": KEY_ENV, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}]
    if settings.metrics_token:
        token = {"secretKeyRef": {"name": secret, "key": METRICS_TOKEN}}
        env.append({"name": METRICS_TOKEN_ENV, "valueFrom": token})
    bounds = {"cpu": "1", "memory": "256Mi"}
    return {
        "name": FRONT, "image": settings.stager_image, "args": args, "env": env,
        "ports": [{"name": HTTP, "containerPort": port, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": bounds},
        "readinessProbe": {"tcpSocket": {"port": HTTP}, "periodSeconds": 5},
        "securityContext": {**security, "readOnlyRootFilesystem": True},
    }  # fmt: skip
