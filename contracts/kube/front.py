"""An engine pod's front (gateway.front): a second container in the pod, from Wharf's image,
which owns the pod's `http` port (where the gateways call, found by workers.kube.observe) and
lets in only the engine key, read from the service's Secret. The engine's own port is named
`engine`: the kubelet probes it there; its peers reach it through the NetworkPolicy.

TLS (WHARF_K8S_ENGINE_TLS_SECRET, contracts.engine_tls): the operator's Secret of type
kubernetes.io/tls is mounted read-only, as a folder (so the kubelet brings each renewal, which
the front loads at its next handshake), into the front only; the front serves it, and the pod
template's annotation `wharf.io/engine-tls-domain` says under which name the gateways call the
pod: its IP address dashed (`10-1-2-3`) under `<namespace>.pod.<cluster domain>`, the A
record the cluster's DNS keeps for every pod. Pod IPs change with every pod, so that one name
pattern, `*.<namespace>.pod.<cluster domain>`, is what the Secret's certificate must carry;
callers verify the chain against WHARF_ENGINE_TLS_CA and that name, as on Wharf's own nodes.
"""

from __future__ import annotations

from contracts import engine_tls
from contracts.engine_front import KEY_ENV, METRICS_TOKEN_ENV, front_port
from contracts.engines.plan import ContainerPlan
from contracts.kube.names import KubeSettings

FRONT = "front"  # the container's name
HTTP = "http"  # the pod's serving port's name: the front's
ENGINE_PORT = "engine"  # the engine container's own port's name
METRICS_TOKEN = "engine-metrics-token"  # its entry in the service's Secret, where set
TLS_VOLUME = "engine-tls"  # the operator's TLS Secret, mounted into the front only
TLS_FOLDER = "/run/wharf/engine-tls"
# On the pod template: the DNS domain its pod's dashed IP is named under, for the certificate.
ANNOTATION_TLS_DOMAIN = "wharf.io/engine-tls-domain"


def tls_domain(settings: KubeSettings) -> str:
    """Where the cluster's DNS names the namespace's pods; "": the fronts speak plain HTTP."""
    if not settings.engine_tls_secret:
        return ""
    return f"{settings.namespace}.pod.{settings.cluster_domain.strip('.')}"


def tls_volume(settings: KubeSettings) -> dict | None:
    """The pod's volume of the operator's TLS Secret (None without one): read-only for all,
    as the front runs as the image's user and no other container mounts it."""
    if not settings.engine_tls_secret:
        return None
    secret = {"secretName": settings.engine_tls_secret, "defaultMode": 0o444}
    return {"name": TLS_VOLUME, "secret": secret}


def front_container(
    plan: ContainerPlan, settings: KubeSettings, secret: str, key: str, security: dict
) -> dict:
    """The front of the engine of `plan`: its key (entry `key` of Secret `secret`) and the
    metrics token by reference only; small bounds; `security` (the restricted profile), with
    nothing it may write; the operator's TLS pair, where set, as files."""
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
    mounts = []
    if settings.engine_tls_secret:  # the Secret's tls.crt and tls.key (kubernetes.io/tls)
        env += [{"name": engine_tls.CERT_ENV, "value": f"{TLS_FOLDER}/tls.crt"},
                {"name": engine_tls.KEY_ENV, "value": f"{TLS_FOLDER}/tls.key"}]  # fmt: skip
        mounts = [{"name": TLS_VOLUME, "mountPath": TLS_FOLDER, "readOnly": True}]
    container = {
        "name": FRONT, "image": settings.stager_image, "args": args, "env": env,
        "ports": [{"name": HTTP, "containerPort": port, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": bounds},
        "readinessProbe": {"tcpSocket": {"port": HTTP}, "periodSeconds": 5},
        "securityContext": {**security, "readOnlyRootFilesystem": True},
    }  # fmt: skip
    if mounts:
        container["volumeMounts"] = mounts
    return container
