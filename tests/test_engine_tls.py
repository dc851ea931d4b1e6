"""TLS to the engines' fronts (contracts.engine_tls): a real front process serving the node's
certificate, the gateway's own client and the worker's readiness check verifying it against
WHARF_ENGINE_TLS_CA (and refusing it without), the process runtime reporting https:// for a
node with a certificate, and what the Docker runtime gives a front container."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from contracts import engine_front as front
from contracts import engine_tls
from contracts.engines.plan import ContainerPlan
from contracts.serving_tls import ServingTls
from gateway.relay.upstream import ConnectFailedError, Upstream
from tests.test_engine_front import KEY, Engine, engine, start_front  # noqa: F401 (fixture)
from tests.tls_support import Authority, authority, server_pair
from workers.nodes.health import is_healthy
from workers.runtimes.base import InstanceRequest
from workers.runtimes.docker_front import front_options, observed_url
from workers.runtimes.process import ProcessRuntime, free_port


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    return authority(tmp_path)


@pytest.fixture
def node_pair(tmp_path: Path, ca: Authority) -> ServingTls:
    (tmp_path / "tls").mkdir()
    pair = ServingTls(tmp_path / "tls" / "node.crt", tmp_path / "tls" / "node.key")
    server_pair(ca, pair.cert, pair.key, "node-1")
    return pair


@pytest.fixture
def trusted(monkeypatch, ca: Authority):
    """This process verifies engine fronts against the test's CA (WHARF_ENGINE_TLS_CA)."""
    monkeypatch.setenv(engine_tls.CA_ENV, str(ca.cert))
    engine_tls.client_context.cache_clear()
    yield
    engine_tls.client_context.cache_clear()


@pytest.fixture
def tls_front(engine: Engine, node_pair: ServingTls):  # noqa: F811 (the fixture, imported)
    env = {engine_tls.CERT_ENV: str(node_pair.cert), engine_tls.KEY_ENV: str(node_pair.key)}
    proc, url = start_front(engine.port, env=env)
    yield url.replace("http://", "https://")
    proc.terminate()
    proc.wait(10)


async def fetch(url: str, key: str = KEY) -> tuple[int, bytes]:
    upstream = Upstream()
    try:
        answer = await upstream.request(
            url, "GET", "/v1/models", [("authorization", f"Bearer {key}")], b"", 10
        )
        status, body = answer.status, await answer.read(1 << 16)
        answer.release()
        return status, body
    finally:
        await upstream.close()


def test_the_gateway_calls_a_tls_front_verified_by_the_ca(tls_front, engine, trusted):  # noqa: F811
    assert asyncio.run(fetch(tls_front)) == (200, b"/v1/models")
    assert engine.asked == ["/v1/models"]
    status, _ = asyncio.run(
        fetch(tls_front, key="wek-wrong")
    )  # the key is still checked, inside TLS
    assert status == 401 and engine.asked == ["/v1/models"]


def test_the_gateway_refuses_a_front_its_ca_did_not_sign(tls_front, monkeypatch):
    monkeypatch.delenv(engine_tls.CA_ENV, raising=False)
    engine_tls.client_context.cache_clear()  # the system's CAs only
    try:
        with pytest.raises(ConnectFailedError, match="CERTIFICATE_VERIFY_FAILED"):
            asyncio.run(fetch(tls_front))
    finally:
        engine_tls.client_context.cache_clear()


def test_a_tls_front_takes_no_plain_http(tls_front, engine):  # noqa: F811
    with pytest.raises(Exception):  # noqa: B017 (a reset or a broken answer, not a 200)
        asyncio.run(fetch(tls_front.replace("https://", "http://")))
    assert engine.asked == []


def test_the_workers_readiness_check_verifies_the_front(tls_front, trusted):
    assert is_healthy(tls_front, front.READY_PATH, key=KEY)


def test_the_process_runtime_serves_https_on_a_node_with_a_certificate(
    tmp_path, node_pair, trusted
):
    port = free_port()
    engine_command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    plan = ContainerPlan(image="", args=engine_command, port=port, health_path="/")
    runtime = ProcessRuntime(str(tmp_path / "models"), tmp_path / "instances", tls=node_pair)
    observed = runtime.create(InstanceRequest("tlsnode", "tlsnode-1", "h", plan, engine_key=KEY))
    try:
        assert observed.url.startswith("https://127.0.0.1:")
        deadline = time.monotonic() + 20
        while not is_healthy(observed.url, "/", key=KEY):
            assert time.monotonic() < deadline, "the instance never answered over TLS"
            time.sleep(0.2)
    finally:
        runtime.remove("tlsnode-1")


def test_a_docker_front_gets_the_nodes_pair_as_read_only_folders(node_pair):
    plan = ContainerPlan(image="engine", args=["serve"], port=8000)
    request = InstanceRequest("svc", "svc-1", "h", plan, engine_key=KEY)
    options = front_options(request, "engine-id", "node-1", "", node_pair)
    folder = str(node_pair.cert.parent)
    assert options["volumes"] == {folder: {"bind": "/run/wharf/engine-tls/0", "mode": "ro"}}
    assert options["environment"][engine_tls.CERT_ENV] == "/run/wharf/engine-tls/0/node.crt"
    assert options["environment"][engine_tls.KEY_ENV] == "/run/wharf/engine-tls/0/node.key"
    apart = ServingTls(node_pair.cert, Path("/etc/wharf/private/node.key"))
    options = front_options(request, "engine-id", "node-1", "", apart)
    assert options["volumes"] == {
        folder: {"bind": "/run/wharf/engine-tls/0", "mode": "ro"},
        "/etc/wharf/private": {"bind": "/run/wharf/engine-tls/1", "mode": "ro"},
    }
    assert options["environment"][engine_tls.KEY_ENV] == "/run/wharf/engine-tls/1/node.key"
    plain = front_options(request, "engine-id", "node-1", "")
    assert plain["volumes"] == {} and engine_tls.CERT_ENV not in plain["environment"]


@pytest.mark.parametrize(
    ("network", "tls", "url"),
    [
        ("bridge", True, "https://10.0.0.5:32768"),
        ("bridge", False, "http://10.0.0.5:32768"),
        ("host", True, "http://10.0.0.5:8000"),  # no front on the host network
    ],
)
def test_a_docker_instances_url_says_whether_its_front_speaks_tls(network, tls, url, node_pair):
    attrs = {
        "HostConfig": {"NetworkMode": network},
        "NetworkSettings": {"Ports": {"8000/tcp": [{"HostPort": "32768"}]}},
    }
    assert observed_url("10.0.0.5", attrs, "8000", node_pair if tls else None) == url
