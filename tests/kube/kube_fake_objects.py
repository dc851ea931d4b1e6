"""Small manifests for the fake cluster's own tests, applied as Wharf applies them."""

from __future__ import annotations

import kubernetes

APPLY = {
    "field_manager": "wharf",
    "force": True,
    "_content_type": "application/apply-patch+yaml",
}


def config_map(name: str, data: dict | None = None, **meta: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, **meta},
        "data": data or {},
    }


def secret(name: str, string_data: dict, **meta: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, **meta},
        "type": "Opaque",
        "stringData": string_data,
    }


def owned_by(owner: kubernetes.client.V1ConfigMap) -> list[dict]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": owner.metadata.name,
            "uid": owner.metadata.uid,
            "blockOwnerDeletion": True,
            "controller": False,
        }
    ]


def deployment(
    name: str = "svc",
    image: str = "vllm/vllm-openai:v0.11.0",
    replicas: int = 2,
    gpus: int = 1,
    max_surge: int | str = 1,
    max_unavailable: int | str = 0,
    **meta: object,
) -> dict:
    """A Deployment of one engine container with a readiness probe and `gpus` cards."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels, **meta},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": max_unavailable},
            },
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 60,
                    "containers": [
                        {
                            "name": "engine",
                            "image": image,
                            "ports": [{"name": "http", "containerPort": 8000}],
                            "resources": {
                                "requests": {"cpu": "4", "memory": "16Gi"},
                                "limits": {"memory": "16Gi", "nvidia.com/gpu": gpus},
                            },
                            "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
                        }
                    ],
                },
            },
        },
    }


def names(items: list) -> list[str]:
    return sorted(item.metadata.name for item in items)
