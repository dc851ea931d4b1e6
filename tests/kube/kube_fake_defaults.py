"""The API server's defaulting for what Wharf applies (SetDefaults_* of apps/v1 and core/v1):
a Deployment read back carries these, so a runtime that compares what it applied with what it
reads must expect them."""

from __future__ import annotations

from kube_fake_store import Kind


def apply_defaults(kind: Kind, obj: dict) -> None:
    if kind.kind == "Deployment":
        deployment_defaults(obj.setdefault("spec", {}))
    elif kind.kind == "Secret":
        obj.setdefault("type", "Opaque")


def deployment_defaults(spec: dict) -> None:
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.get("rollingUpdate") or {}
        strategy["rollingUpdate"] = rolling
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    template = spec.setdefault("template", {})
    template.setdefault("metadata", {})
    pod_spec_defaults(template.setdefault("spec", {}))


def pod_spec_defaults(spec: dict) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        _container_defaults(container)
    for volume in spec.get("volumes") or []:
        for source in ("configMap", "secret"):
            if isinstance(volume.get(source), dict):
                volume[source].setdefault("defaultMode", 420)


def _container_defaults(container: dict) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("imagePullPolicy", _pull_policy(str(container.get("image", ""))))
    container.setdefault("resources", {})
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")
    for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
        probe = container.get(probe_name)
        if not isinstance(probe, dict):
            continue
        probe.setdefault("timeoutSeconds", 1)
        probe.setdefault("periodSeconds", 10)
        probe.setdefault("successThreshold", 1)
        probe.setdefault("failureThreshold", 3)
        if isinstance(probe.get("httpGet"), dict):
            probe["httpGet"].setdefault("scheme", "HTTP")
    for env in container.get("env") or []:
        field_ref = (env.get("valueFrom") or {}).get("fieldRef")
        if isinstance(field_ref, dict):
            field_ref.setdefault("apiVersion", "v1")


def _pull_policy(image: str) -> str:
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"
