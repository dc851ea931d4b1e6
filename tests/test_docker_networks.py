"""Engines only through the gateway, on Docker: each service's containers are on a bridge
network of their own, so one service's engine cannot reach another's container address (on
Docker's default bridge every container reached every other's ports), while instances of one
service still reach each other. Real dockerd, the worker's own runtime and renderer."""

from __future__ import annotations

import ipaddress
import time
import uuid

from contracts.engines import render
from contracts.spec import parse_spec
from tests.test_docker_limits import IMAGE, DockerNode, node  # noqa: F401 (the fixture)
from workers.runtimes.base import InstanceRequest
from workers.runtimes.docker import service_network

SERVER = "exec python3 -m http.server 8000 --bind 0.0.0.0"
PROBE = ("import socket,sys; s=socket.socket(); s.settimeout(3); "
         "print(s.connect_ex((sys.argv[1], 8000)))")  # fmt: skip


def server(name: str) -> dict:
    return {"name": name, "containers": [{"image": IMAGE, "command": SERVER, "port": 8000}]}


def address(container) -> str:
    (network,) = container.attrs["NetworkSettings"]["Networks"].values()
    return network["IPAddress"]


def reaches(container, ip: str, wait: float = 0) -> bool:
    deadline = time.monotonic() + wait
    while True:
        code, out = container.exec_run(["python3", "-c", PROBE, ip])
        if code == 0 and out.decode().strip() == "0":
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def test_one_services_engines_cannot_reach_anothers(node: DockerNode):  # noqa: F811
    ours, theirs = (f"net-{uuid.uuid4().hex[:6]}" for _ in range(2))
    target = node.start(server(theirs))
    first = node.start(server(ours))
    runtime = node.runtime()
    assert list(first.attrs["NetworkSettings"]["Networks"]) == [service_network(ours)]
    plan = render(parse_spec(server(ours)), runtime.placement())
    node.created.append(f"{ours}-2")
    runtime.create(InstanceRequest(ours, f"{ours}-2", "h", plan))
    sibling = runtime.client.containers.get(f"{ours}-2")
    assert reaches(sibling, address(first), wait=20)  # its own service's: reachable
    assert reaches(first, address(sibling), wait=20)
    assert not reaches(first, address(target))  # another service's engine: not
    # Its network goes with the service's last container on the node (Docker's address pools
    # hold a few dozen bridges), not before.
    runtime.remove(f"{ours}-1")
    assert network_exists(runtime, ours)
    runtime.remove(f"{ours}-2")
    assert not network_exists(runtime, ours)
    runtime.remove(f"{theirs}-1")
    assert not network_exists(runtime, theirs)


def network_exists(runtime, service: str) -> bool:
    return any(n.name == service_network(service) for n in runtime.client.networks.list())


def test_two_networks_of_one_name_are_shared_not_ambiguous(node: DockerNode):  # noqa: F811
    """dockerd 20.10 checks duplicate names only as best it can: two workers on one dockerd
    starting the same service at once may make two networks of one name, and dockerd then
    starts no container on it ('ambiguous'). A start keeps the oldest and removes the other;
    the kept one goes with the service's last container."""
    service = f"dup-{uuid.uuid4().hex[:6]}"
    client = node.runtime().client
    older = client.networks.create(service_network(service), driver="bridge")
    time.sleep(0.01)
    client.networks.create(service_network(service), driver="bridge", check_duplicate=False)
    first = node.start(server(service))
    (attached,) = first.attrs["NetworkSettings"]["Networks"].values()
    assert attached["NetworkID"] == older.id
    assert [n.id for n in client.networks.list() if n.name == service_network(service)] == [
        older.id
    ]
    node.runtime().remove(f"{service}-1")
    assert not network_exists(node.runtime(), service)


KEY = "wek-" + "c" * 64
CALL = ("import sys, urllib.request as u, urllib.error as e\n"
        "h = dict([sys.argv[2].split(': ')]) if sys.argv[2] else {}\n"
        "r = u.Request(sys.argv[1], headers=h)\n"
        "try: print(u.urlopen(r, timeout=5).status)\n"
        "except e.HTTPError as x: print(x.code)\n"
        "except Exception as x: print(type(x).__name__)")  # fmt: skip


def call(container, url: str, header: str = "") -> str:
    code, out = container.exec_run(["python3", "-c", CALL, url, header])
    return out.decode().strip()


def test_another_services_container_meets_the_engines_front_at_the_nodes_address(node):  # noqa: F811
    """The engine's port is published nowhere; its front's is, on the node's address, and it
    answers another service's container (which reaches that address) with a 401 unless it
    has the engine key; the engine's own service still reaches the engine on their bridge."""
    ipam = node.runtime().client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    # Some dockerd versions leave the default bridge's gateway out: the subnet's first address.
    bridge = ipam.get("Gateway") or str(ipaddress.ip_network(ipam["Subnet"])[1])
    ours, theirs = (f"front-{uuid.uuid4().hex[:6]}" for _ in range(2))
    engine = node.start(server(ours), key=KEY, WHARF_NODE_ADDRESS=bridge)
    other = node.start(server(theirs), key=KEY.replace("c", "d"), WHARF_NODE_ADDRESS=bridge)
    (observed,) = node.runtime().list(ours)
    assert observed.url and observed.url.startswith(f"http://{bridge}:")
    ports = engine.attrs["NetworkSettings"]["Ports"]
    assert "8000/tcp" not in ports or not ports["8000/tcp"]  # the engine's port: unpublished
    assert engine.attrs["HostConfig"]["RestartPolicy"]["Name"] == "no"
    front = node.runtime().client.containers.get(f"{ours}-1-front")
    assert front.attrs["HostConfig"]["NetworkMode"] == f"container:{engine.id}"
    assert front.attrs["HostConfig"]["ReadonlyRootfs"] and front.attrs["HostConfig"]["CapDrop"]
    deadline = time.monotonic() + 30
    key = f"Authorization: Bearer {KEY}"
    while call(other, observed.url + "/", key) != "200":  # the engine is up, with the key
        assert time.monotonic() < deadline, node.runtime().logs(f"{ours}-1")
        time.sleep(0.5)
    assert call(other, observed.url + "/") == "401"
    assert call(other, observed.url + "/", "Authorization: Bearer wek-guess") == "401"
    assert not reaches(other, address(engine))  # nor the engine's container address
    assert call(other, observed.url + "/.wharf/ready", key) == "200"
    # The front going takes the instance down with it: the agent restarts the pair.
    front.stop(timeout=1)
    assert not node.runtime().list(ours)[0].running
    node.runtime().remove(f"{ours}-1")
    assert not [c for c in node.runtime().client.containers.list(all=True)
                if c.name.startswith(f"{ours}-1")]  # fmt: skip
