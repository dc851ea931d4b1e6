"""deploy/kubernetes/components/engine-tls: the production overlay with the component, rendered
by `kubectl kustomize` as a platform team would, is what Kubernetes' schemas accept (strict);
the workers get the Secret's name to render engine pods with, and the gateways and workers the
Secret's `ca.crt`, and only that, at the path WHARF_ENGINE_TLS_CA names."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.test import override_settings

from controlplane.cluster import kube_settings

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "deploy/kubernetes"
VERSIONS = ("1.33.0", "1.37.0")  # as tests/test_deploy_kustomize.py
SECRET = "wharf-engine-tls"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl not found: Kustomize comes with kubectl 1.27 or later")
    folder = tmp_path_factory.mktemp("overlay")
    # Kustomize takes only relative paths to other kustomizations.
    production = os.path.relpath(KUBE / "overlays/production", folder)
    component = os.path.relpath(KUBE / "components/engine-tls", folder)
    (folder / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [production], "components": [component]})
    )
    run = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    return [doc for doc in yaml.safe_load_all(run.stdout) if doc]


def of_kind(objs: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_overlay_with_the_component_is_what_kubernetes_accepts(rendered, version):
    for obj in rendered:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_settings_name_the_secret_and_the_ca_file(rendered):
    (settings,) = of_kind(rendered, "ConfigMap").values()
    assert settings["data"]["WHARF_K8S_ENGINE_TLS_SECRET"] == SECRET
    assert settings["data"]["WHARF_ENGINE_TLS_CA"] == "/run/wharf/engine-ca/ca.crt"
    readme = (ROOT / "README.md").read_text().split("## Configuration", 1)[1]
    documented = set(re.findall(r"`(WHARF_[A-Z0-9_]+)`", readme))
    assert set(settings["data"]) <= documented


@pytest.mark.parametrize("name", ["wharf-gateway", "wharf-worker"])
def test_the_gateways_and_workers_read_only_the_secrets_ca(rendered, name):
    pod = of_kind(rendered, "Deployment")[name]["spec"]["template"]["spec"]
    (settings,) = of_kind(rendered, "ConfigMap")
    ca_file = Path(of_kind(rendered, "ConfigMap")[settings]["data"]["WHARF_ENGINE_TLS_CA"])
    (volume,) = [v for v in pod["volumes"] if v["name"] == "engine-ca"]
    assert volume["secret"] == {"secretName": SECRET,
                                "items": [{"key": "ca.crt", "path": ca_file.name}]}  # fmt: skip
    (container,) = pod["containers"]
    reads = {ref["configMapRef"]["name"] for ref in container["envFrom"] if "configMapRef" in ref}
    assert settings in reads
    assert {"name": "engine-ca", "mountPath": str(ca_file.parent), "readOnly": True} in (
        container["volumeMounts"]
    )


def test_no_other_part_mounts_the_engines_secret(rendered):
    for kind in ("Deployment", "Job"):
        for name, obj in of_kind(rendered, kind).items():
            secrets = {
                v["secret"]["secretName"]
                for v in obj["spec"]["template"]["spec"].get("volumes", [])
                if "secret" in v
            }
            assert (SECRET in secrets) == (name in ("wharf-gateway", "wharf-worker")), name


def test_the_workers_render_engine_pods_with_the_settings():
    with override_settings(
        WHARF_K8S_ENGINE_TLS_SECRET=SECRET, WHARF_K8S_CLUSTER_DOMAIN="corp.example"
    ):
        found = kube_settings()
    assert (found.engine_tls_secret, found.cluster_domain) == (SECRET, "corp.example")
