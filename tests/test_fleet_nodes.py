"""The fleet on real nodes (tests/test_fleet.py has the same behaviour on in-memory runtimes):
the whole system plus workers started with `manage.py worker --node … --address 127.0.0.1x`,
each a node with fake cards (tests/fleet_nodes_support.py), running real engines.

- process runtime, three nodes with 2, 1 and 4 cards: replicas spread, no card given twice
  (the engines' own CUDA_VISIBLE_DEVICES agree), instances on their node's address, a spec too
  big for any node pending with what each node lacks; one node's worker and engines killed
  (-9): its instances come back on the others and the gateway serves on; the node back: it
  removes what moved and nothing runs twice (one engine process per instance row);
- Docker runtime, two nodes sharing one dockerd: each labels its containers with its node,
  and acts only on its own: a killed or stopped worker's containers are left alone by the
  other, and each removes only the unassigned containers of its own node;
- vLLM's CPU build on other nodes: a single engine behind its front on its node's address,
  and prefill and decode on two nodes.
"""

from __future__ import annotations

import secrets
import time
from urllib.parse import urlsplit

import httpx
import pytest

from contracts.engine_front import front_port
from tests.docker_support import empty_image
from tests.fleet_nodes_support import (
    MARKER,
    RUN,
    Fleet,
    engines,
    kill_groups,
    start_fleet_system,
    wait_for,
)
from tests.system import require_runtime

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

# A custom engine, cheap to start. In a container the shell is PID 1, which ignores SIGTERM
# unless it traps it: without the trap every stop would wait out Docker's 10 s.
SERVER = "exec python3 -m http.server $PORT --bind 0.0.0.0"
DOCKER_SERVER = "trap 'exit 0' TERM; python3 -m http.server $PORT --bind 0.0.0.0 & wait"


@pytest.fixture(scope="module")
def system(tmp_path_factory, redis_url):
    home = tmp_path_factory.mktemp("wharf-nodes")
    system = start_fleet_system(home, home / "models", redis_url)
    try:
        with system.api() as api:  # the test decides placement: the stack's own node takes none
            wait_for(lambda: api.get("/nodes/local").status_code == 200, 30, "node local")
            assert api.post("/nodes/local/cordon").status_code == 202
        yield system
    finally:
        system.stack.stop()


@pytest.fixture
def fleet(system):
    fleet = Fleet(system)
    yield fleet
    try:
        delete(system)  # with the workers still up to drain them
    finally:
        fleet.close()  # and what a failed test left running


def delete(system, *names: str, timeout: float = 60) -> None:
    """Delete the services (by default every one) and wait until each is gone, its instances
    removed (the API hides a deleting service at once; its events stay readable until then)."""
    with system.api() as api:
        names = names or tuple(s["name"] for s in api.get("/services").json())
        for name in names:
            api.delete(f"/services/{name}")
        for name in names:
            wait_for(lambda name=name: api.get(f"/services/{name}/events").status_code == 404,
                     timeout, f"{name} deleted")  # fmt: skip


def server_spec(name: str, instances: int, gpu: int = 0, command=SERVER, **metadata) -> dict:
    return {
        "name": name,
        "containers": [{"image": "wharf/vllm-cpu:0.32.0", "port": 8001, "command": command,
                        "env": [{"name": MARKER, "value": RUN}]}],
        "metadata": {"instance": instances, "gpu": gpu, "termination_grace_period": 2,
                     **metadata},
        "health_check": {"period_seconds": 1, "timeout_seconds": 1},
    }  # fmt: skip


def deploy(system, spec: dict) -> str:
    with system.api() as api:
        created = api.post("/services", json=spec)
        assert created.status_code == 201, created.text
    return created.json()["token"]


def instances(system, name: str) -> list[dict]:
    with system.api() as api:
        return api.get(f"/services/{name}/instances").json()


def events(system, name: str, reason: str) -> list[dict]:
    with system.api() as api:
        return [e for e in api.get(f"/services/{name}/events").json() if e["reason"] == reason]


def nodes(system) -> dict[str, dict]:
    with system.api() as api:
        return {n["name"]: n for n in api.get("/nodes").json()}


def running(
    fleet: Fleet, name: str, count: int, timeout: float = 90, away_from: str = ""
) -> list[dict]:
    """Until the service is running with `count` ready instances and nothing else (none on
    node `away_from`); those."""

    def settled() -> list[dict] | None:
        with fleet.system.api() as api:
            service = api.get(f"/services/{name}").json()
        rows = instances(fleet.system, name)
        ready = [r for r in rows if r["state"] == "ready"]
        ok = service["phase"] == "running" and len(ready) == len(rows) == count
        ok = ok and away_from not in {r["node"] for r in rows}
        return ready if ok else None

    def context() -> str:
        with fleet.system.api() as api:
            history = api.get(f"/services/{name}/events?limit=20").json()
        lines = [f"{e['created_at']} {e['reason']} {e['instance']}: {e['message']}"
                 for e in reversed(history)]  # fmt: skip
        return "\n".join([*lines, str(instances(fleet.system, name)), fleet.logs()])

    return wait_for(settled, timeout, f"{name} running with {count} instances", context)


def cards_held(system) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Instance -> (node, card indexes), from the nodes API (the cards and who holds each)."""
    held: dict[str, tuple[str, list[int]]] = {}
    for node in nodes(system).values():
        for card in node["cards"]:
            if card["instance"]:
                held.setdefault(card["instance"], (node["name"], []))[1].append(card["index"])
    return {name: (node, tuple(sorted(cards))) for name, (node, cards) in held.items()}


def host(url: str) -> str:
    return urlsplit(url).hostname or ""


def port(url: str) -> int:
    return urlsplit(url).port or 0


def assert_one_engine_per_row(system, services: list[str]) -> None:
    """What the operating system runs is exactly what the rows say: one engine process per
    instance, on the row's port, seeing the row's cards and no others."""
    rows = [r for name in services for r in instances(system, name)]
    held = cards_held(system)
    found = engines(RUN)
    assert sorted(e.port for e in found) == sorted(port(r["url"]) for r in rows), (found, rows)
    assert len({e.pgid for e in found}) == len(found)  # each its own process group
    by_port = {e.port: e for e in found}
    for row in rows:
        engine = by_port[port(row["url"])]
        cards = held.get(row["name"], (row["node"], ()))[1]
        assert engine.cuda_visible_devices == ",".join(map(str, cards)), (row, engine)


def through_gateway(system, name: str, token: str, times: int) -> set[str]:
    """GET / of a custom service through the gateway's EAS path; the instances that answered."""
    served = set()
    for _ in range(times):
        answer = httpx.get(f"{system.stack.gateway_url}/api/predict/{name}/",
                           headers={"Authorization": token}, timeout=10)  # fmt: skip
        assert answer.status_code == 200 and "Directory listing" in answer.text, answer.text
        served.add(answer.headers["x-wharf-instance"])
    return served


def test_three_process_nodes_place_move_and_never_run_anything_twice(fleet):
    system = fleet.system
    started = time.monotonic()
    cards = {"n1": 2, "n2": 1, "n3": 4}
    address = {"n1": "127.0.0.11", "n2": "127.0.0.12", "n3": "127.0.0.13"}
    for name, count in cards.items():
        fleet.add(name, address[name], cards=count)
    ready = fleet.wait_ready(list(cards))
    assert {n: len(ready[n]["cards"]) for n in cards} == cards
    assert {n: ready[n]["address"] for n in cards} == address
    assert ready["n3"]["cards"][3]["name"] == "NVIDIA H100 80GB HBM3"

    # Replicas spread over the nodes; a second service gets other cards.
    web = deploy(system, server_spec("web", 3, gpu=1))
    web_rows = running(fleet, "web", 3)
    assert sorted(r["node"] for r in web_rows) == ["n1", "n2", "n3"]
    deploy(system, server_spec("batch", 2, gpu=1))
    batch_rows = running(fleet, "batch", 2)
    assert len({r["node"] for r in batch_rows}) == 2
    held = cards_held(system)
    rows = web_rows + batch_rows
    assert sorted(held) == sorted(r["name"] for r in rows)
    given = [(node, card) for node, indexes in held.values() for card in indexes]
    assert len(given) == len(set(given)) == 5  # one card each, none twice
    for row in rows:
        assert held[row["name"]][0] == row["node"]
        assert host(row["url"]) == address[row["node"]]  # on its node's address
        assert row["runtime"] == "process"
    assert_one_engine_per_row(system, ["web", "batch"])
    used = {n: nodes(system)[n]["card_counts"]["gpu"]["used"] for n in cards}
    assert sum(used.values()) == 5
    assert through_gateway(system, "web", web, 6) <= {r["name"] for r in web_rows}

    # Eight cards fit nowhere: pending, saying what each node lacks.
    deploy(system, server_spec("huge", 1, gpu=8))
    wait_for(lambda: events(system, "huge", "InsufficientResources"), 30, "huge refused")
    with system.api() as api:
        huge = api.get("/services/huge").json()
    assert huge["phase"] == "pending" and instances(system, "huge") == []
    for name, count in cards.items():
        lacks = f"{name}: {count - used[name]} free gpu of {count}, needs 8"
        assert lacks in huge["last_error"] and lacks in huge["progress"], huge
    assert "local: cordoned" in huge["last_error"]
    delete(system, "huge")
    assert {r["name"] for r in instances(system, "web") + instances(system, "batch")} == {
        r["name"] for r in rows
    }

    # The node with the most instances whose cards the others can take over dies: its worker
    # and its engines, killed -9.
    free_elsewhere = {n: sum(cards[m] - used[m] for m in cards if m != n) for n in cards}
    candidates = [n for n in cards if used[n] <= free_elsewhere[n]]
    victim = max(candidates, key=lambda n: (used[n], n))
    moved = {r["name"] for r in rows if r["node"] == victim}
    assert len(moved) >= 2, (victim, rows)
    ports = {port(r["url"]) for r in rows if r["node"] == victim}
    groups = {e.pgid for e in engines(RUN) if e.port in ports}
    assert len(groups) == len(moved)
    killed_at = time.monotonic()
    fleet.workers[victim].kill()
    kill_groups(groups)

    web_rows = running(fleet, "web", 3, timeout=60, away_from=victim)
    batch_rows = running(fleet, "batch", 2, timeout=60, away_from=victim)
    moved_in = time.monotonic() - killed_at
    rows = web_rows + batch_rows
    assert victim not in {r["node"] for r in rows}
    assert not moved & {r["name"] for r in rows}
    lost = {e["instance"] for s in ("web", "batch") for e in events(system, s, "InstanceLost")}
    assert moved <= lost
    assert nodes(system)[victim]["state"] == "not_ready"
    given = [(node, c) for node, indexes in cards_held(system).values() for c in indexes]
    assert len(given) == len(set(given)) == 5
    assert_one_engine_per_row(system, ["web", "batch"])
    assert through_gateway(system, "web", web, 6) <= {r["name"] for r in web_rows}

    # It comes back: it removes what moved while it was away, and runs nothing twice.
    fleet.workers[victim].start()
    fleet.wait_ready([victim])
    from workers.runtimes.process import ProcessRuntime

    runtime = ProcessRuntime("/nonexistent", fleet.home / "instances", node=victim)
    wait_for(lambda: not {o.name for o in runtime.list()} & moved, 30,
             f"{victim} rid of what moved", fleet.logs)  # fmt: skip
    removed = {e["instance"] for s in ("web", "batch") for e in events(system, s, "InstanceRemoved")
               if f"no longer assigned to node {victim}" in e["message"]}  # fmt: skip
    assert moved <= removed
    assert {r["name"] for r in instances(system, "web") + instances(system, "batch")} == {
        r["name"] for r in rows
    }  # nothing went back, nothing was added
    assert nodes(system)[victim]["instances"] == []
    assert_one_engine_per_row(system, ["web", "batch"])
    assert through_gateway(system, "web", web, 3) <= {r["name"] for r in web_rows}

    delete(system)
    wait_for(lambda: not engines(RUN), 30, "every engine stopped")
    print(f"three nodes: {time.monotonic() - started:.0f} s; moved in {moved_in:.0f} s")


def docker_containers(service: str, settled: bool = True) -> dict[str, dict]:
    """Every engine container of `service` on this dockerd, running or not: name -> its
    details. Each engine's front (workers.runtimes.docker_front) goes with it: one each, once
    the nodes are `settled` (while a node removes an engine and its front, one of the two is
    gone before the other: polls during a removal pass settled=False)."""
    import docker

    from workers.runtimes.docker import listed
    from workers.runtimes.docker_front import LABEL_FRONT

    every = listed(docker.from_env(), f"wharf.service={service}")
    found = [c for c in every if LABEL_FRONT not in c.labels]
    fronts = {c.labels[LABEL_FRONT] for c in every if LABEL_FRONT in c.labels}
    if settled:
        assert {c.name for c in found if c.status == "running"} <= fronts <= {c.name for c in found}
    return {c.name: {"id": c.id, "node": c.labels.get("wharf.node"), "status": c.status,
                     "ports": c.attrs["NetworkSettings"]["Ports"]} for c in found}  # fmt: skip


def stray_container(service: str, node: str) -> str:
    """A container of `service` that no row assigns anywhere, labelled as `node`'s (what a
    crash between create and record would leave): created, never started."""
    import docker

    name = f"{service}-stray-{node}"
    client = docker.from_env()
    client.containers.create(
        empty_image(client), command=["/none"], name=name,
        labels={"wharf.service": service, "wharf.instance": name, "wharf.node": node,
                "wharf.spec-hash": "stray", "wharf.port": "8001"},
    )  # fmt: skip
    return name


def test_two_docker_nodes_on_one_dockerd_touch_only_their_own_containers(fleet):
    require_runtime("docker")
    system = fleet.system
    started = time.monotonic()
    group = f"dock-{RUN}"  # these two nodes' resource group: nothing else lands there
    d1, d2 = f"d{RUN}-1", f"d{RUN}-2"
    address = {d1: "127.0.0.21", d2: "127.0.0.22"}
    service = f"dock-{RUN}-{secrets.token_hex(2)}"
    for name in (d1, d2):
        fleet.add(name, address[name], runtime="docker", labels=f"resource={group}")
    ready = fleet.wait_ready([d1, d2])
    assert {ready[n]["runtime"] for n in (d1, d2)} == {"docker"}
    assert "wharf/vllm-cpu:0.32.0" in ready[d1]["images"]

    token = deploy(system, server_spec(service, 2, command=DOCKER_SERVER, resource=group))
    rows = running(fleet, service, 2)
    assert sorted(r["node"] for r in rows) == [d1, d2]
    containers = docker_containers(service)
    assert {n: c["node"] for n, c in containers.items()} == {r["name"]: r["node"] for r in rows}
    for row in rows:
        (binding,) = containers[row["name"]]["ports"][f"{front_port(8001)}/tcp"]  # its front's
        assert binding["HostIp"] == address[row["node"]] == host(row["url"])
    first = {r["node"]: r["name"] for r in rows}
    through_gateway(system, service, token, 2)

    # d2 dies. d1 removes an unassigned container of its own, never d2's: neither the one
    # d2 ran (unassigned once it moved to d1) nor an unassigned one labelled d2's.
    fleet.workers[d2].kill()
    strays = {node: stray_container(service, node) for node in (d1, d2)}
    wait_for(lambda: strays[d1] not in docker_containers(service, settled=False), 20,
             f"{d1} removing its unassigned container", fleet.logs)  # fmt: skip
    rows = running(fleet, service, 2, timeout=60, away_from=d2)
    assert [r["node"] for r in rows] == [d1, d1]
    containers = docker_containers(service)
    assert containers[first[d2]]["status"] == "running"  # d2's engine, left alone
    assert strays[d2] in containers
    assert {containers[r["name"]]["node"] for r in rows} == {d1}
    through_gateway(system, service, token, 2)

    # d2 comes back: it removes its own unassigned containers and nothing of d1's.
    before = {r["name"]: containers[r["name"]]["id"] for r in rows}
    fleet.workers[d2].start()
    fleet.wait_ready([d2])
    wait_for(lambda: not {first[d2], strays[d2]} & set(docker_containers(service, False)), 30,
             f"{d2} removing its unassigned containers", fleet.logs)  # fmt: skip
    containers = docker_containers(service)
    assert {n: c["id"] for n, c in containers.items()} == before
    assert {c["status"] for c in containers.values()} == {"running"}

    # d1 is stopped the way an operator stops a worker: its containers stay; d2 takes over
    # the instances and still leaves d1's containers alone.
    fleet.workers[d1].stop()
    rows = running(fleet, service, 2, timeout=60, away_from=d1)
    assert [r["node"] for r in rows] == [d2, d2]
    containers = docker_containers(service)
    assert {n for n in before if containers.get(n, {}).get("status") == "running"} == set(before)
    through_gateway(system, service, token, 2)
    fleet.workers[d1].start()
    fleet.wait_ready([d1])
    # 60 s: under the full suite on two cores a restarted worker's first agent pass has taken
    # longer than 30 s to come round (seen once in three runs).
    wait_for(lambda: set(docker_containers(service, False)) == {r["name"] for r in rows}, 60,
             f"{d1} removing what moved", fleet.logs)  # fmt: skip

    delete(system)
    assert docker_containers(service) == {}
    print(f"two docker nodes: {time.monotonic() - started:.0f} s")


@pytest.mark.timeout(600)
def test_real_vllm_engines_on_other_nodes_serve_at_their_own_addresses(fleet):
    """vLLM's CPU build as local processes, two services deployed at once so that their
    engines start together:
    - "tiny" on node n4 (127.0.0.14), placed there by its resource group: its front binds that
      address alone and lets in only its engine key, with which the gateway reaches it there;
    - "split", 1P1D on nodes n6 and n7: each engine serves at the port the scheduler gave it
      on its own node's address, and decode continues from the KV cache prefill wrote
      (ExampleConnector: a folder both nodes share here, as NFS would)."""
    from controlplane.services.tiny_model import write_tiny_model

    system = fleet.system
    write_tiny_model(fleet.home / "models" / "tiny-llama")
    group, pd_group = f"vllm-{RUN}", f"pd-{RUN}"
    fleet.add("n4", "127.0.0.14", labels=f"resource={group}")
    fleet.add("n5", "127.0.0.15", cards=1)
    fleet.add("n6", "127.0.0.16", labels=f"resource={pd_group}")
    fleet.add("n7", "127.0.0.17", labels=f"resource={pd_group}")
    fleet.wait_ready(["n4", "n5", "n6", "n7"])
    llm = {"engine": "vllm-cpu", "model": "tiny-llama", "max_model_len": 2048, "max_num_seqs": 4}
    token = deploy(system, {
        "name": "tiny", "llm": llm | {"served_model_name": "tiny-model"},
        "metadata": {"instance": 1, "resource": group, "termination_grace_period": 2},
    })  # fmt: skip
    split_token = deploy(system, {
        "name": "split",
        "llm": llm | {"served_model_name": "split-model",
                      "pd": {"prefill": {"instance": 1}, "decode": {"instance": 1},
                             "kv_connector": "ExampleConnector"}},
        "metadata": {"resource": pd_group, "termination_grace_period": 2},
    })  # fmt: skip

    (row,) = running(fleet, "tiny", 1, timeout=300)
    assert row["node"] == "n4" and host(row["url"]) == "127.0.0.14"
    with pytest.raises(httpx.ConnectError):  # not on the other loopback addresses
        httpx.get(f"http://127.0.0.1:{port(row['url'])}/health", timeout=5)
    assert httpx.get(f"{row['url']}/health", timeout=5).status_code == 401  # no engine key
    answer = httpx.post(
        f"{system.stack.gateway_url}/v1/completions",
        headers={"Authorization": f"Bearer {token}"},
        json={"model": "tiny-model", "prompt": "Hello", "max_tokens": 4, "ignore_eos": True},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 4
    assert answer.headers["x-wharf-instance"] == row["name"]

    rows = {r["role"]: r for r in running(fleet, "split", 2, timeout=300)}
    assert {rows["prefill"]["node"], rows["decode"]["node"]} == {"n6", "n7"}
    for row in rows.values():
        address = "127.0.0.16" if row["node"] == "n6" else "127.0.0.17"
        assert host(row["url"]) == address and 30000 <= port(row["url"]) <= 32767
        assert row["kv_port"] and row["kv_port"] != port(row["url"])
    answer = httpx.post(
        f"{system.stack.gateway_url}/v1/completions",
        headers={"Authorization": f"Bearer {split_token}"},
        json={"model": "split-model", "prompt": "The harbour master counts the ships",
              "max_tokens": 6, "ignore_eos": True},
        timeout=120,
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 6
    with system.api() as api:
        logs = api.get(f"/services/split/instances/{rows['decode']['name']}/logs").text
    assert "External Cache Hit" in logs
    delete(system, timeout=60)
