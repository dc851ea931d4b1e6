"""How Wharf names and labels what it creates on a cluster.

Every object carries `app.kubernetes.io/managed-by: wharf` and the labels of its service, role
and spec hash, and is owned (ownerReferences) by its service's root ConfigMap: deleting the
root lets Kubernetes' garbage collector remove the rest, even after a crash of Wharf's.
Nothing without Wharf's label is ever read as an instance, changed or deleted.

A canary release (contracts.canary) runs beside the stable objects as objects of its own,
labelled `wharf.io/track: canary`: its Deployment per role (`<slug>-canary[-<role>]`) and its
Secret (`<slug>-canary-secrets`); the stable ones carry no track label.

Service names allow what Kubernetes names and label values do not (capitals, underscores, 256
characters), so objects are named by a slug: the name in lower case with `-` for `_`, cut to
40 characters, and followed by 8 hex digits of the name's hash whenever it had to change; the
exact name is kept in an annotation.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from contracts.limits import TenantLimits

FIELD_MANAGER = "wharf"  # server-side apply's field manager
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "wharf"
LABEL_SERVICE = "wharf.io/service"  # the service's slug
LABEL_ROLE = "wharf.io/role"  # "" | "prefill" | "decode"
LABEL_SPEC_HASH = "wharf.io/spec-hash"  # the spec hash of the pod template's version
LABEL_TRACK = "wharf.io/track"  # "canary" on a canary release's objects and pods; none: stable
ANNOTATION_SERVICE = "wharf.io/service-name"  # the exact service name
ANNOTATION_VERSION = "wharf.io/version"  # the ServiceVersion number the object renders
_SLUG_LENGTH = 40


def slug(service: str) -> str:
    """A DNS-1123 label for `service`, unique to it."""
    cut = service.lower().replace("_", "-").strip("-")[:_SLUG_LENGTH].strip("-")
    if cut == service:
        return cut
    digest = hashlib.sha256(service.encode()).hexdigest()[:8]
    return f"{cut}-{digest}" if cut else f"svc-{digest}"


def root_name(service: str) -> str:
    """The service's root ConfigMap, owner of everything else of the service."""
    return f"{slug(service)}-wharf"


def network_policy_name(service: str) -> str:
    """The NetworkPolicy that says who may reach the service's engine pods."""
    return f"{slug(service)}-ingress"


def _named(service: str, *parts: str) -> str:
    return "-".join([slug(service), *(part for part in parts if part)])


def deployment_name(service: str, role: str = "", track: str = "") -> str:
    """The Deployment of a service, or of one role of a prefill/decode service; of its canary
    release's version when `track` is "canary"."""
    return _named(service, track, role)


def secret_name(service: str, track: str = "") -> str:
    """The service's Secret (its canary's, with `track`): the engine keys and object-storage
    credentials of its pods."""
    return _named(service, track, "secrets")


def engine_key_name(service: str, role: str = "", track: str = "") -> str:
    """What the engine key of a Deployment's pods derives from (contracts.engine_keys): one
    key for every pod of the Deployment, since its pods share one template."""
    return f"k8s/{deployment_name(service, role, track)}"


def labels(
    service: str, role: str | None = None, spec_hash: str | None = None, track: str = ""
) -> dict:
    out = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_SERVICE: slug(service)}
    if role is not None:
        out[LABEL_ROLE] = role
    if spec_hash is not None:
        out[LABEL_SPEC_HASH] = spec_hash
    if track:
        out[LABEL_TRACK] = track
    return out


def selector(service: str | None = None, role: str | None = None) -> str:
    """A label selector for what Wharf manages: all of it, one service's, one role's."""
    found = {LABEL_MANAGED_BY: MANAGED_BY}
    if service is not None:
        found[LABEL_SERVICE] = slug(service)
    if role is not None:
        found[LABEL_ROLE] = role
    return ",".join(f"{key}={value}" for key, value in found.items())


@dataclass(frozen=True)
class KubeSettings:
    """The cluster side of WHARF_RUNTIME=kubernetes (see the README's table)."""

    namespace: str = "default"  # WHARF_K8S_NAMESPACE
    gpu_resource: str = "nvidia.com/gpu"  # WHARF_K8S_GPU_RESOURCE
    npu_resource: str = "huawei.com/Ascend910"  # WHARF_K8S_NPU_RESOURCE
    # The image of the init container that stages OSS/OBS/S3 models (Wharf's own image).
    stager_image: str = "wharf/wharf:latest"  # WHARF_K8S_STAGER_IMAGE (wharf/wharf:<version>)
    # A PersistentVolumeClaim holding the model store, mounted read-only at /models where a
    # spec names a model-store model ("" : such specs cannot run on the cluster).
    model_store_claim: str = ""  # WHARF_K8S_MODEL_CLAIM
    # How long a terminating pod's preStop waits before the engine gets SIGTERM, so that the
    # gateways drop it from routing first (its grace is the spec's termination_grace_period).
    pre_stop_s: int = 5  # WHARF_K8S_PRESTOP_SECONDS
    progress_deadline_s: int = 600  # a rollout that makes no progress this long is stalled
    # How long a new pod may take to pass its first readiness check when the spec's
    # health_check.startup_timeout_seconds is unset (the startup probe's budget).
    health_timeout_s: int = 900  # WHARF_HEALTH_TIMEOUT
    # A ReadWriteMany PersistentVolumeClaim where the prefill and decode pods of a service with
    # llm.pd.kv_connector ExampleConnector share their KV-cache folder (a sub-folder per
    # service); "": such specs cannot run on the cluster.
    shared_kv_claim: str = ""  # WHARF_K8S_KV_CLAIM
    # A Secret of the namespace holding WHARF_<SCHEME>_ENDPOINT / _ACCESS_KEY_ID /
    # _ACCESS_KEY_SECRET for staging OSS/OBS/S3 models whose spec entry carries no
    # credentials, as the workers' environment does on nodes ("": none).
    storage_secret: str = ""  # WHARF_K8S_STORAGE_SECRET
    # Where the init containers stage hf:// and modelscope:// models from.
    hub_endpoints: tuple[tuple[str, str], ...] = ()  # WHARF_HF_ENDPOINT, WHARF_MODELSCOPE_...
    # Memory and CPU limits of pods whose spec names none, the memory emptyDirs' cap
    # (WHARF_DEFAULT_MEMORY_MB, WHARF_DEFAULT_CPUS, WHARF_MEMORY_EMPTY_DIR_MAX_MB); the pids
    # limit is the kubelet's (its podPidsLimit), not a pod's.
    limits: TenantLimits = field(default_factory=TenantLimits)
    # The images the platform vouches for (controlplane.workspaces.policy.platform_images): any
    # other is a workspace's own, pulled on every start so the registry checks its pull secret
    # (a kubelet would otherwise run another workspace's private image from its node's store).
    platform_images: frozenset[str] = frozenset()
    # The token with which Prometheus reads engines' metrics pages through their fronts (in
    # the service's Secret; "": only the engine key opens them).
    metrics_token: str = field(default="", repr=False)  # WHARF_ENGINE_METRICS_TOKEN
    # The OTLP/HTTP collector engines send their traces to ("": none).
    otlp_endpoint: str = ""  # WHARF_ENGINE_OTLP_ENDPOINT, else WHARF_OTLP_ENDPOINT
