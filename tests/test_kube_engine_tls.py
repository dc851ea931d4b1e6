"""TLS to the engines on the Kubernetes runtime (WHARF_K8S_ENGINE_TLS_SECRET): the operator's
kubernetes.io/tls Secret mounted read-only into each engine pod's front, the front's variables
naming its files, the objects still as Kubernetes' schemas accept them (strict), the observed
URL under the pod's DNS name, and a real front serving the Secret's files as the kubelet lays
them out, called by the gateway's own client through that name and verified against
WHARF_ENGINE_TLS_CA; a certificate for another namespace from the same CA is refused."""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import replace
from pathlib import Path

import kubernetes_validate
import pytest
from cryptography import x509

from contracts import engine_tls
from contracts.kube import front
from gateway.relay.upstream import ConnectFailedError
from tests import test_engine_front
from tests.kube_manifest_support import BASE, SETTINGS, VERSIONS, deployment, example, objects
from tests.test_engine_tls import fetch
from tests.tls_support import authority, server_pair
from workers.kube import observe

engine = test_engine_front.engine  # the fixture: a stand-in engine that records its calls

SECRET = "engine-tls"
TLS = replace(SETTINGS, engine_tls_secret=SECRET)  # namespace llm, cluster.local
WILDCARD = "*.llm.pod.cluster.local"


def containers(pod: dict) -> dict[str, dict]:
    return {c["name"]: c for c in pod["containers"]}


def env_of(container: dict) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


# ---- the manifests ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["vllm-gpu-qwen", "pd-vllm-gpu-nixl", "vllm-oss-model"])
def test_objects_with_the_tls_secret_are_as_kubernetes_accepts(name, version):
    objs = objects(example(name), TLS)
    deployments = [o for o in objs if o["kind"] == "Deployment"]
    assert deployments
    for obj in objs:
        kubernetes_validate.validate(obj, version, strict=True)
    for found in deployments:
        template = found["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        assert annotations[front.ANNOTATION_TLS_DOMAIN] == "llm.pod.cluster.local"
        assert {"name": "engine-tls", "secret": {"secretName": SECRET, "defaultMode": 0o444}} in (
            template["spec"]["volumes"]
        )


def test_only_the_front_mounts_the_secret_read_only_and_serves_its_files():
    pod = deployment(objects(BASE, TLS))["spec"]["template"]["spec"]
    by_name = containers(pod)
    served = by_name[front.FRONT]
    assert served["volumeMounts"] == [
        {"name": "engine-tls", "mountPath": "/run/wharf/engine-tls", "readOnly": True}
    ]  # the whole folder, not a subPath: the kubelet brings each renewal
    assert env_of(served)[engine_tls.CERT_ENV] == "/run/wharf/engine-tls/tls.crt"
    assert env_of(served)[engine_tls.KEY_ENV] == "/run/wharf/engine-tls/tls.key"
    for name, container in by_name.items():
        if name != front.FRONT:
            mounted = {m["name"] for m in container.get("volumeMounts", [])}
            assert "engine-tls" not in mounted and engine_tls.CERT_ENV not in env_of(container)
    for container in pod.get("initContainers", []):
        assert "engine-tls" not in {m["name"] for m in container.get("volumeMounts", [])}


def test_without_the_setting_the_front_speaks_plain_http_as_before():
    found = deployment(objects(BASE))
    pod = found["spec"]["template"]["spec"]
    assert "volumeMounts" not in containers(pod)[front.FRONT]
    assert engine_tls.CERT_ENV not in env_of(containers(pod)[front.FRONT])
    assert all(v["name"] != "engine-tls" for v in pod["volumes"])
    assert front.ANNOTATION_TLS_DOMAIN not in found["spec"]["template"]["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("namespace", "domain", "expected"),
    [
        ("llm", "cluster.local", "llm.pod.cluster.local"),
        ("wharf-serving", "corp.example.", "wharf-serving.pod.corp.example"),
    ],
)
def test_the_pods_are_named_under_their_namespace_and_the_cluster_domain(
    namespace, domain, expected
):
    settings = replace(TLS, namespace=namespace, cluster_domain=domain)
    assert front.tls_domain(settings) == expected
    assert front.tls_domain(replace(settings, engine_tls_secret="")) == ""


# ---- the observed URL ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("domain", "ip", "url"),
    [
        ("", "10.1.2.3", "http://10.1.2.3:8001"),
        ("", "fd00::1:2", "http://[fd00::1:2]:8001"),
        ("llm.pod.cluster.local", "10.1.2.3", "https://10-1-2-3.llm.pod.cluster.local:8001"),
        ("llm.pod.cluster.local", "fd00::1:2", "https://fd00--1-2.llm.pod.cluster.local:8001"),
    ],
)
def test_the_observed_url_is_the_pods_ip_or_its_dns_name_over_tls(domain, ip, url):
    annotations = {front.ANNOTATION_TLS_DOMAIN: domain} if domain else {}
    pod = {
        "metadata": {"name": "chat-1", "annotations": annotations},
        "spec": {
            "containers": [{"name": "front", "ports": [{"name": "http", "containerPort": 8001}]}]
        },  # fmt: skip
        "status": {"podIP": ip, "phase": "Running"},
    }
    assert observe.instance(pod).url == url


def test_a_pod_rendered_with_tls_is_observed_at_https():
    template = deployment(objects(BASE, TLS))["spec"]["template"]
    pod = {**template, "status": {"podIP": "10.0.0.7", "phase": "Running"}}
    port = containers(template["spec"])[front.FRONT]["ports"][0]["containerPort"]
    assert observe.instance(pod).url == f"https://10-0-0-7.llm.pod.cluster.local:{port}"


# ---- a real front serving the Secret's files -------------------------------------------------


def secret_volume(folder: Path, ca, version: str, dns_names: tuple[str, ...]) -> None:
    """The Secret's files as the kubelet writes a secret volume: a timestamped folder,
    `..data` linked to it and each entry linked through `..data`; a new version swaps the
    `..data` link."""
    data = folder / f"..{version}"
    data.mkdir()
    server_pair(ca, data / "tls.crt", data / "tls.key", "engines", dns_names)
    link = folder / "..data_tmp"
    link.symlink_to(data.name)
    os.replace(link, folder / "..data")
    for entry in ("tls.crt", "tls.key"):
        if not (folder / entry).is_symlink():
            (folder / entry).symlink_to(f"..data/{entry}")


@pytest.fixture
def cluster_dns(monkeypatch):
    """Names `a-b-c-d.<namespace>.pod.cluster.local` resolve to a.b.c.d, as the cluster's DNS
    answers them; everything else as before."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if isinstance(host, str) and host.endswith(".pod.cluster.local"):
            host = host.split(".", 1)[0].replace("-", ".")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture
def ca(tmp_path, monkeypatch):
    found = authority(tmp_path)
    monkeypatch.setenv(engine_tls.CA_ENV, str(found.cert))
    engine_tls.client_context.cache_clear()
    yield found
    engine_tls.client_context.cache_clear()


def pod_front(engine_port: int, folder: Path):
    """A front started with the variables the manifest gives it, the Secret's folder here."""
    container = containers(deployment(objects(BASE, TLS))["spec"]["template"]["spec"])
    env = {
        name: str(value).replace(front.TLS_FOLDER, str(folder))
        for name, value in env_of(container[front.FRONT]).items()
        if name in (engine_tls.CERT_ENV, engine_tls.KEY_ENV)
    }
    proc, plain = test_engine_front.start_front(engine_port, env=env)
    port = int(plain.rsplit(":", 1)[1])
    meta = {"annotations": {front.ANNOTATION_TLS_DOMAIN: front.tls_domain(TLS)}}
    return proc, port, observe.url(meta, "127.0.0.1", port)


def served_serial(host: str, port: int) -> int:
    context = engine_tls.client_context()
    with (
        socket.create_connection((host, port), timeout=5) as sock,
        context.wrap_socket(sock, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def test_a_front_given_the_secrets_files_answers_the_gateway_over_tls(
    tmp_path,
    engine,
    ca,
    cluster_dns,
):
    folder = tmp_path / "engine-tls"
    folder.mkdir()
    secret_volume(folder, ca, "2026_11_28_20_00_00.1", (WILDCARD,))
    proc, port, url = pod_front(engine.port, folder)
    try:
        assert url == f"https://127-0-0-1.llm.pod.cluster.local:{port}"
        assert asyncio.run(fetch(url)) == (200, b"/v1/models")
        assert engine.asked == ["/v1/models"]
        host = url.split("//")[1].rsplit(":", 1)[0]
        first = served_serial(host, port)
        secret_volume(folder, ca, "2026_11_28_21_00_00.2", (WILDCARD,))  # renewed
        assert served_serial(host, port) != first  # the next handshake serves the renewal
        assert asyncio.run(fetch(url))[0] == 200
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_certificate_for_another_namespace_is_refused(tmp_path, engine, ca, cluster_dns):
    folder = tmp_path / "engine-tls"
    folder.mkdir()
    secret_volume(folder, ca, "2026_11_28_20_00_00.1", ("*.other.pod.cluster.local",))
    proc, _, url = pod_front(engine.port, folder)
    try:
        with pytest.raises(ConnectFailedError, match="CERTIFICATE_VERIFY_FAILED"):
            asyncio.run(fetch(url))
        assert engine.asked == []
    finally:
        proc.terminate()
        proc.wait(10)
