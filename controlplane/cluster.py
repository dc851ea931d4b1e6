"""WHARF_RUNTIME=kubernetes as the control plane sees it: the settings services are rendered
with (contracts.kube), and a dry render that refuses, with the field named, a spec the cluster
as configured cannot run, before anything is saved. The workers render the same way."""

from __future__ import annotations

from django.conf import settings

from contracts import spec_facts
from contracts.kube import manifests, names
from contracts.kube.pod_template import ManifestError
from contracts.spec import ServiceSpec
from controlplane.limits import tenant_limits
from controlplane.workspaces.policy import platform_images

KUBERNETES = "kubernetes"


def kube_settings() -> names.KubeSettings:
    return names.KubeSettings(
        namespace=settings.WHARF_K8S_NAMESPACE,
        gpu_resource=settings.WHARF_K8S_GPU_RESOURCE,
        npu_resource=settings.WHARF_K8S_NPU_RESOURCE,
        stager_image=settings.WHARF_K8S_STAGER_IMAGE,
        model_store_claim=settings.WHARF_K8S_MODEL_CLAIM,
        pre_stop_s=settings.WHARF_K8S_PRESTOP_SECONDS,
        progress_deadline_s=settings.WHARF_K8S_PROGRESS_DEADLINE,
        health_timeout_s=settings.WHARF_HEALTH_TIMEOUT,
        shared_kv_claim=settings.WHARF_K8S_KV_CLAIM,
        storage_secret=settings.WHARF_K8S_STORAGE_SECRET,
        hub_endpoints=(("hf", settings.WHARF_HF_ENDPOINT),
                       ("modelscope", settings.WHARF_MODELSCOPE_ENDPOINT)),
        limits=tenant_limits(),
        platform_images=platform_images(),
        metrics_token=settings.WHARF_ENGINE_METRICS_TOKEN,
        otlp_endpoint=settings.WHARF_ENGINE_OTLP_ENDPOINT,
    )  # fmt: skip


def cluster_errors(spec: ServiceSpec) -> dict[str, list[str]]:
    """{field: [why]} for what the cluster cannot run of `spec`; {} off Kubernetes."""
    if settings.WHARF_RUNTIME != KUBERNETES:
        return {}
    replicas = spec_facts.replicas(spec)
    try:
        manifests.render(
            spec.name, spec, 0, replicas, kube_settings(), manifests.Owner("dry-run", ""),
            dict.fromkeys(replicas, ""),
        )  # fmt: skip
    except ManifestError as exc:
        return {exc.field: [exc.message]}
    return {}
