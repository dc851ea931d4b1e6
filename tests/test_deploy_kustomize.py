"""deploy/kubernetes/: the Kustomize base and its overlays, rendered by `kubectl kustomize` as a
platform team would, every object accepted by Kubernetes' published schemas (strict, as
tests/test_kube_manifests.py checks the objects Wharf renders for services), and the objects
wired to each other: every Secret and ConfigMap a pod reads exists or is one the operator makes,
Services, the Ingress and the HPA find what they point at, and the probes are the API's and
the gateway's."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml
from cryptography.fernet import Fernet

from contracts.kube.manifests import ENGINE_CALLERS
from tests.kube_manifest_support import VERSIONS

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "deploy/kubernetes"
OVERLAYS = ("production", "dev")
NAMESPACE = "wharf-serving"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
# What the production overlay reads and the operator creates (overlays/production/README.md).
OPERATOR_SECRETS = {"wharf-keys", "wharf-datastores", "wharf-tls"}
WHARF_PARTS = ("wharf-api", "wharf-gateway", "wharf-worker")


@cache
def rendered(overlay: str) -> tuple[dict, ...]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl not found: Kustomize comes with kubectl 1.27 or later")
    run = subprocess.run([kubectl, "kustomize", str(KUBE / "overlays" / overlay)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    return tuple(doc for doc in yaml.safe_load_all(run.stdout) if doc)


def of_kind(overlay: str, kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in rendered(overlay) if o["kind"] == kind}


def pod_spec(overlay: str, deployment: str) -> dict:
    return of_kind(overlay, "Deployment")[deployment]["spec"]["template"]["spec"]


def workloads(overlay: str) -> list[dict]:
    return [o for o in rendered(overlay) if o["kind"] in ("Deployment", "Job")]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_is_one_kubernetes_accepts(overlay, version):
    kinds = set()
    for obj in rendered(overlay):
        kubernetes_validate.validate(obj, version, strict=True)
        kinds.add(obj["kind"])
    assert {"Deployment", "HorizontalPodAutoscaler", "Ingress", "NetworkPolicy", "Job",
            "Role", "ClusterRole", "Service", "ConfigMap"} <= kinds  # fmt: skip


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_everything_is_in_wharfs_namespace(overlay):
    for obj in rendered(overlay):
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"].get("namespace") == NAMESPACE, obj["metadata"]["name"]


def _references(spec: dict) -> set[tuple[str, str]]:
    """(kind, name) of every Secret and ConfigMap a pod spec reads."""
    found = set()
    for container in spec["containers"] + spec.get("initContainers", []):
        for source in container.get("envFrom", []):
            for key, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                if key in source:
                    found.add((kind, source[key]["name"]))
        for variable in container.get("env", []):
            ref = variable.get("valueFrom", {})
            for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                if key in ref:
                    found.add((kind, ref[key]["name"]))
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_secret_and_config_map_a_pod_reads_exists_or_is_the_operators(overlay):
    made = {(o["kind"], o["metadata"]["name"]) for o in rendered(overlay)}
    outside = OPERATOR_SECRETS if overlay == "production" else set()
    for workload in workloads(overlay):
        for kind, name in _references(workload["spec"]["template"]["spec"]):
            assert (kind, name) in made or (kind == "Secret" and name in outside), (kind, name)
    tls = [t["secretName"] for t in of_kind(overlay, "Ingress")["wharf"]["spec"].get("tls", [])]
    assert set(tls) <= outside


def test_the_dev_secrets_hold_every_key_the_pods_read():
    secrets = of_kind("dev", "Secret")
    for workload in workloads("dev"):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            for variable in container.get("env", []):
                ref = variable.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in secrets[ref["name"]]["data"], ref


def test_production_writes_no_secret():
    assert "Secret" not in {o["kind"] for o in rendered("production")}


def test_the_dev_keys_and_passwords_fit_together():
    """The secrets key is a Fernet key, and Wharf's URLs carry the passwords the dev PostgreSQL
    and Redis are started with."""
    secrets = {name.rsplit("-", 1)[0]: {k: base64.b64decode(v).decode()
                                        for k, v in secret["data"].items()}
               for name, secret in of_kind("dev", "Secret").items()}  # fmt: skip
    Fernet(secrets["wharf-keys"]["WHARF_SECRETS_KEY"])
    servers = secrets["wharf-dev-datastores"]
    urls = secrets["wharf-datastores"]
    assert urlparse(urls["DATABASE_URL"]).password == servers["POSTGRES_PASSWORD"]
    assert urlparse(urls["REDIS_URL"]).password == servers["REDIS_PASSWORD"]
    assert urlparse(urls["DATABASE_URL"]).hostname in of_kind("dev", "Service")
    assert urlparse(urls["REDIS_URL"]).hostname in of_kind("dev", "Service")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_ingress_and_hpa_find_what_they_point_at(overlay):
    deployments = of_kind(overlay, "Deployment")
    services = of_kind(overlay, "Service")
    for service in services.values():
        selector = service["spec"]["selector"]
        (target,) = [
            d for d in deployments.values()
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]  # fmt: skip
        ports = {p["name"] for c in target["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", [])}  # fmt: skip
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    for rule in of_kind(overlay, "Ingress")["wharf"]["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            ports = services[backend["name"]]["spec"]["ports"]
            assert backend["port"]["name"] in {p["name"] for p in ports}
    (hpa,) = of_kind(overlay, "HorizontalPodAutoscaler").values()
    assert hpa["spec"]["scaleTargetRef"]["name"] == "wharf-gateway"
    assert "replicas" not in deployments["wharf-gateway"]["spec"]  # the HPA's to set
    gateway = pod_spec(overlay, "wharf-gateway")["containers"][0]
    assert gateway["resources"]["requests"]["cpu"]  # what CPU utilization is measured against


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("part", ["wharf-api", "wharf-gateway"])
def test_the_api_and_gateway_are_ready_on_readyz_and_alive_on_healthz(overlay, part):
    (container,) = pod_spec(overlay, part)["containers"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_wharfs_own_pods_run_restricted(overlay):
    for name in WHARF_PARTS:
        spec = pod_spec(overlay, name)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in spec["containers"]:
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            }  # fmt: skip
        # Only the worker talks to the Kubernetes API (rbac.yaml's service account).
        assert spec.get("automountServiceAccountToken", True) is (name == "wharf-worker")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_gateway_reads_no_database_and_no_key_but_the_token_key(overlay):
    (container,) = pod_spec(overlay, "wharf-gateway")["containers"]
    assert not [s for s in container["envFrom"] if "secretRef" in s]
    secret = {e["name"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert secret == {"WHARF_TOKEN_KEY", "WHARF_GATEWAY_METRICS_TOKEN", "REDIS_URL"}
    values = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert values == {"WHARF_API_URL": "http://wharf-api:8000"}  # Async services' queues
    assert "wharf-api" in of_kind(overlay, "Service")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_engine_network_policies_let_in_the_gateway_and_worker_pods_by_their_labels(overlay):
    """The per-service NetworkPolicy Wharf renders names its callers by label
    (contracts.kube.manifests.ENGINE_CALLERS): those must be the gateway's and worker's."""
    for name in ENGINE_CALLERS:
        labels = of_kind(overlay, "Deployment")[name]["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == name
    policies = of_kind(overlay, "NetworkPolicy")
    assert policies["wharf-engines-default-deny"]["spec"] == {
        "podSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "wharf"}},
        "policyTypes": ["Ingress"]}  # fmt: skip
    assert "ingress" not in policies["wharf-no-ingress"]["spec"]


def test_the_dev_datastores_take_connections_from_wharfs_parts_only():
    policies = of_kind("dev", "NetworkPolicy")
    callers = {
        "wharf-postgres": {"wharf-api", "wharf-worker", "wharf-migrate"},
        "wharf-redis": {"wharf-api", "wharf-worker", "wharf-gateway"},
    }
    for store, parts in callers.items():
        (rule,) = policies[store]["spec"]["ingress"]
        (peer,) = rule["from"]
        (expression,) = peer["podSelector"]["matchExpressions"]
        assert expression["key"] == "app.kubernetes.io/name" and set(expression["values"]) == parts


def test_the_settings_config_map_holds_only_documented_variables():
    readme = (ROOT / "README.md").read_text().split("## Configuration", 1)[1]
    documented = set(re.findall(r"`((?:WHARF|DATABASE|REDIS|CELERY)_[A-Z0-9_]+)`", readme))
    for overlay in OVERLAYS:
        (settings,) = [c for c in rendered(overlay) if c["kind"] == "ConfigMap"]
        assert set(settings["data"]) <= documented
        for secret in of_kind(overlay, "Secret").values():
            if secret["metadata"]["name"].startswith(("wharf-keys", "wharf-datastores")):
                assert set(secret["data"]) <= documented
