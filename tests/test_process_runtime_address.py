"""Local process instances are reached at the node's address (WHARF_NODE_ADDRESS), so a
gateway on another host can call them: through their front, which checks the engine key,
while the engine itself listens on loopback."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from contracts.engines import render
from contracts.engines.plan import ContainerPlan
from contracts.spec import parse_spec
from workers.runtimes.base import InstanceRequest
from workers.runtimes.process import ProcessRuntime

NODE = "127.0.0.2"  # any of 127.0.0.0/8 is this host on Linux, yet not 127.0.0.1
KEY = "wek-" + "b" * 64


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


def test_an_engine_listens_on_loopback_behind_its_front_on_the_node_address(runtime):
    """The engine binds loopback; its front (gateway.front) the node's address, and lets in
    only its engine key; the instance's URL is the front's."""
    placement = runtime.placement()
    assert placement.host == "127.0.0.1"
    port = placement.port
    assert port is not None
    server = [sys.executable, "-m", "http.server", str(port), "--bind", placement.host]
    plan = ContainerPlan(image="", args=server, port=port, health_path="/")
    observed = runtime.create(InstanceRequest("addr", "addr-1", "h", plan, engine_key=KEY))
    assert observed.url.startswith(f"http://{NODE}:") and observed.url != f"http://{NODE}:{port}"
    front_port = int(observed.url.rsplit(":", 1)[1])
    deadline = time.monotonic() + 15
    while refuses("127.0.0.1", port) or refuses(NODE, front_port):
        assert time.monotonic() < deadline, runtime.logs("addr-1")
        time.sleep(0.1)
    key = {"Authorization": f"Bearer {KEY}"}
    assert httpx.get(observed.url + "/", headers=key, trust_env=False).status_code == 200
    assert httpx.get(observed.url + "/", trust_env=False).status_code == 401
    assert refuses(NODE, port)  # the engine itself: not on the node's address
    assert refuses("127.0.0.1", front_port)  # the front: on the node's address only
    (listed,) = runtime.list("addr")
    assert listed.url == observed.url and listed.running  # as a restarted worker finds it
    runtime.remove("addr-1")
    assert refuses("127.0.0.1", port)  # the engine went with its front's process group


def test_a_prefill_decode_member_listens_on_the_node_address_for_its_peers(runtime):
    placement = replace(runtime.placement(), host=NODE)  # workers.nodes.starter.pd_placement
    port = placement.port
    assert port is not None
    server = [sys.executable, "-m", "http.server", str(port), "--bind", placement.host]
    plan = ContainerPlan(image="", args=server, port=port, health_path="/")
    request = InstanceRequest("pd", "pd-1", "h", plan, role="prefill", engine_key=KEY)
    assert runtime.create(request).url == f"http://{NODE}:{port}"


def test_vllm_is_told_to_listen_on_loopback(runtime):
    spec = parse_spec({"name": "svc", "llm": {"engine": "vllm-cpu", "model": "m"}})
    args = render(spec, runtime.placement()).args
    assert args[args.index("--host") + 1] == "127.0.0.1"
