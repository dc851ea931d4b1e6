"""Local process instances listen on the node's address (WHARF_NODE_ADDRESS) and report it,
so a gateway on another host can reach them, and nothing else of the host's can."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from contracts.engines import render
from contracts.engines.plan import ContainerPlan
from contracts.spec import parse_spec
from workers.runtimes.base import InstanceRequest
from workers.runtimes.process import ProcessRuntime

NODE = "127.0.0.2"  # any of 127.0.0.0/8 is this host on Linux, yet not 127.0.0.1


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ProcessRuntime]:
    runtime = ProcessRuntime(str(tmp_path / "models"), tmp_path / "instances", node_address=NODE)
    yield runtime
    for instance in runtime.list():
        runtime.remove(instance.name)


def refuses(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex((host, port)) != 0


def test_an_instance_listens_on_the_node_address_only_and_reports_it(runtime):
    placement = runtime.placement()
    assert placement.host == NODE
    port = placement.port
    assert port is not None
    server = [sys.executable, "-m", "http.server", str(port), "--bind", placement.host]
    plan = ContainerPlan(image="", args=server, port=port, health_path="/")
    observed = runtime.create(InstanceRequest("addr", "addr-1", "h", plan))
    assert observed.url == f"http://{NODE}:{port}"
    deadline = time.monotonic() + 15
    while refuses(NODE, port):
        assert time.monotonic() < deadline, runtime.logs("addr-1")
        time.sleep(0.1)
    assert httpx.get(observed.url + "/", trust_env=False).status_code == 200
    assert refuses("127.0.0.1", port)  # not on loopback's usual address, nor on every one
    (listed,) = runtime.list("addr")
    assert listed.url == observed.url  # as a restarted worker finds it


def test_vllm_is_told_to_listen_on_the_node_address(runtime):
    spec = parse_spec({"name": "svc", "llm": {"engine": "vllm-cpu", "model": "m"}})
    args = render(spec, runtime.placement()).args
    assert args[args.index("--host") + 1] == NODE


def test_the_default_node_address_is_loopback(tmp_path):
    placement = ProcessRuntime(str(tmp_path), tmp_path / "instances").placement()
    assert placement.host == "127.0.0.1"
