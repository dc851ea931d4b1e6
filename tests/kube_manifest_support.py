"""What the Kubernetes manifest tests share (tests/test_kube_manifests.py,
tests/test_kube_manifests_pods.py and the modules that render objects the same way): the example
specs, the settings and owner objects are rendered with, and finders over the rendered objects."""

from __future__ import annotations

import json
from pathlib import Path

from contracts.kube import names
from contracts.kube.manifests import Owner, render
from contracts.kube.names import KubeSettings
from contracts.spec import parse_spec
from contracts.spec_facts import replicas

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "deploy_specs").glob("*.json"))
# The oldest Kubernetes the manifests target (preStop's sleep action is on by default from
# 1.30) and the newest schema kubernetes-validate ships.
VERSIONS = ("1.33.0", "1.37.0")
SETTINGS = KubeSettings(namespace="llm", model_store_claim="models", shared_kv_claim="kv-share")
OWNER = Owner("svc-wharf", "6f1c8a54-0000-4000-8000-000000000001")
BASE = {"name": "chat", "llm": {"engine": "vllm", "model": "qwen"}, "metadata": {"gpu": 1}}


def example(name: str) -> dict:
    return json.loads((SPECS[0].parent / f"{name}.json").read_text())


def keys_for(counts: dict[str, int]) -> dict[str, str]:
    return {role: f"engine-key-value-{role or 'plain'}-7c1d" for role in counts}


def objects(data: dict, settings: KubeSettings = SETTINGS, counts=None, version=1) -> list[dict]:
    spec = parse_spec(data)
    counts = counts if counts is not None else replicas(spec)
    return render(spec.name, spec, version, counts, settings, OWNER, keys_for(counts))


def spec_with(**sections) -> dict:
    """BASE with whole sections replaced, and `llm`/`metadata` entries merged."""
    out = {**BASE, **sections}
    for merged in ("llm", "metadata"):
        if merged in sections and sections[merged] is not None:
            out[merged] = {**BASE[merged], **sections[merged]}
    return {k: v for k, v in out.items() if v is not None}


def deployment(objs: list[dict], role: str = "") -> dict:
    (found,) = [
        o for o in objs
        if o["kind"] == "Deployment" and o["metadata"]["labels"][names.LABEL_ROLE] == role
    ]  # fmt: skip
    return found


def pod(objs: list[dict], role: str = "") -> dict:
    return deployment(objs, role)["spec"]["template"]["spec"]


def engine(objs: list[dict], role: str = "") -> dict:
    container, front = pod(objs, role)["containers"]
    assert (container["name"], front["name"]) == ("engine", "front")
    return container


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def volume(objs: list[dict], mount_path: str, role: str = "") -> tuple[dict, dict]:
    """(the engine's mount at `mount_path`, the volume it mounts)."""
    mount = next(m for m in engine(objs, role)["volumeMounts"] if m["mountPath"] == mount_path)
    found = next(v for v in pod(objs, role)["volumes"] if v["name"] == mount["name"])
    return mount, found
