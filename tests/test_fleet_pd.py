"""Prefill/decode separation across nodes, on in-memory runtimes with the real database and
Redis: the scheduler gives each instance its ports on its node, and each node's agent starts
its instance wired to the others where they really are (addresses, ports, cards' RoCE
addresses from the node inventory)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from contracts.allocation import decode_allocation
from contracts.engines.vllm_ascend import GLOBAL_RANK_TABLE, LOCAL_RANK_TABLE
from controlplane.nodes.models import Node
from controlplane.services.models import Instance, Service
from tests.fleet_support import FLEET, Fleet
from tests.test_fleet import deploy
from workers.scheduling.scheduler import schedule

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(store, settings, redis_url, tmp_path):
    settings.REDIS_URL = redis_url
    settings.WHARF_MODEL_DIR = tmp_path
    settings.WHARF_GATEWAY_URL = "http://10.0.0.100:9000"
    (tmp_path / "m").mkdir()
    return Fleet()


def npus(count: int, node: int) -> list[dict]:
    """Cards as an Ascend node's inventory lists them: npu-smi's, with hccn_tool's address."""
    return [{"kind": "npu", "index": i, "name": "910B3", "memory_mb": 65536,
             "ip": f"29.18.{node}.{i}"} for i in range(count)]  # fmt: skip


def pd(engine: str, connector: str, kind: str, **more) -> dict:
    return {"name": "pd", "llm": {"engine": engine, "model": "m", "pd": {
        "prefill": {kind: 2}, "decode": {kind: 2}, "kv_connector": connector, **more}}}  # fmt: skip


def started(fleet: Fleet, role: str):
    """The plan and the placement's node of the instance of `role` the runtimes created."""
    for node, runtime in fleet.runtimes.items():
        for request in runtime.requests.values():
            if request.role == role:
                return request, node
    raise AssertionError(f"no {role} instance was started")


def test_rank_tables_list_every_instance_where_it_runs_with_real_ports_and_card_addresses(fleet):
    for number, name in enumerate(("a", "b"), start=1):
        fleet.node(name)
        Node.objects.filter(name=name).update(cards=npus(2, number))
    deploy(pd("vllm-ascend", "MooncakeConnectorV1", "npu", rank_table=True))
    fleet.settle(3)
    rows = {r.role: r for r in fleet.rows("pd")}
    assert {r.node for r in rows.values()} == {"a", "b"}  # spread: one role per node
    assert all(r.port and r.kv_port and r.kv_port != r.port for r in rows.values())

    prefill, prefill_node = started(fleet, "prefill")
    decode, decode_node = started(fleet, "decode")
    address = {name: runtime.address for name, runtime in fleet.runtimes.items()}
    for request in (prefill, decode):
        env = request.plan.env
        # NODE_PORTS: the real serving ports, in the global table's order (prefill first).
        assert env["NODE_PORTS"] == f"{rows['prefill'].port},{rows['decode'].port}"
        table = json.loads(request.plan.files[GLOBAL_RANK_TABLE])
        scheduler, prefills, decodes = table["server_group_list"]
        assert scheduler["server_list"][0]["server_ip"] == "10.0.0.100"  # the gateway
        for group, node in ((prefills, prefill_node), (decodes, decode_node)):
            (server,) = group["server_list"]
            assert server["server_ip"] == address[node]
            number = 1 if node == "a" else 2
            assert [d["device_ip"] for d in server["device"]] == [
                f"29.18.{number}.{i}" for i in (0, 1)
            ]
    local = json.loads(decode.plan.files[LOCAL_RANK_TABLE])
    assert local["server_list"][0]["server_ip"] == address[decode_node]
    # Each engine serves and exchanges KV at the ports its row holds.
    assert prefill.plan.port == rows["prefill"].port
    config = json.loads(prefill.plan.args[prefill.plan.args.index("--kv-transfer-config") + 1])
    assert config["kv_port"] == rows["prefill"].kv_port


def test_nixl_side_channels_listen_on_each_nodes_address_at_their_own_port(fleet):
    fleet.node("a", cards=2)
    fleet.node("b", cards=2)
    deploy({**pd("vllm", "NixlConnector", "gpu"), "metadata": {"instance": 1}})
    fleet.settle(3)
    rows = {r.role: r for r in fleet.rows("pd")}
    for role in ("prefill", "decode"):
        request, node = started(fleet, role)
        env = request.plan.env
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == fleet.runtimes[node].address
        assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == str(rows[role].kv_port)
        assert request.plan.port == rows[role].port
    assert {r.state for r in rows.values()} == {"ready"}


def test_instances_on_one_node_never_share_a_port(fleet):
    fleet.node("a", cards=4)
    deploy({**pd("vllm", "NixlConnector", "gpu"), "metadata": {"instance": 1}})
    fleet.settle(3)
    ports = [p for r in fleet.rows("pd") for p in (r.port, r.kv_port)]
    assert len(ports) == 4 and len(set(ports)) == 4
    assert all(30000 <= p <= 32767 for p in ports)


def test_instances_placed_in_one_pass_take_the_lowest_free_numbers_and_ports(fleet):
    fleet.node("a", cards=8)
    spec = pd("vllm", "NixlConnector", "gpu")
    spec["llm"]["pd"]["prefill"] = {"gpu": 1, "instance": 3}
    deploy({**spec, "metadata": {"instance": 1}})
    schedule("pd", FLEET)
    prefill = sorted(r.pd_index for r in fleet.rows("pd") if r.role == "prefill")
    assert prefill == [0, 1, 2]
    ports = [p for r in fleet.rows("pd") for p in (r.port, r.kv_port)]
    assert len(ports) == 8 and len(set(ports)) == 8
    # the middle one goes: its replacement takes number 1, not one past the lowest free
    Instance.objects.get(service__name="pd", role="prefill", pd_index=1).delete()
    schedule("pd", FLEET)
    assert sorted(r.pd_index for r in fleet.rows("pd") if r.role == "prefill") == [0, 1, 2]


def test_a_node_out_of_ports_leaves_the_instance_pending_saying_so(fleet):
    fleet.node("a", cards=4)
    deploy({**pd("vllm", "NixlConnector", "gpu"), "metadata": {"instance": 1}})
    schedule("pd", replace(FLEET, pd_ports=(30000, 30002)))  # room for one instance's two
    service = Service.objects.get(name="pd")
    assert service.phase == "pending" and "no free port in WHARF_PD_PORTS" in service.progress
    assert len(fleet.rows("pd")) == 1


def test_each_member_of_instances_across_hosts_reads_its_instances_servers(fleet):
    for number, name in enumerate(("a", "b"), start=1):
        fleet.node(name)
        Node.objects.filter(name=name).update(cards=npus(4, number))
    spec = pd("vllm-ascend", "MooncakeConnectorV1", "npu", rank_table=True)
    for role in ("prefill", "decode"):  # 2 machines x 2 cards each, tensor parallel 4
        spec["llm"]["pd"][role]["tensor_parallel_size"] = 4
    deploy({**spec, "unit": {"size": 2}})
    fleet.settle(4)
    rows = {(r.role, r.rank): r for r in fleet.rows("pd")}
    assert sorted(rows) == [("decode", 0), ("decode", 1), ("prefill", 0), ("prefill", 1)]
    number = {"a": 1, "b": 2}
    address = {name: runtime.address for name, runtime in fleet.runtimes.items()}
    requests = [(node, r) for node, rt in fleet.runtimes.items() for r in rt.requests.values()]
    assert len(requests) == 4  # every member started
    tables = {json.dumps(r.plan.files, sort_keys=True) for _, r in requests if r.role == "decode"}
    assert len(tables) == 1  # both decode members read the same tables
    for node, request in requests:
        env = request.plan.env
        assert env["HCCL_IF_IP"] == address[node]
        assert env["NODE_PORTS"] == f"{rows['prefill', 0].port},{rows['decode', 0].port}"
        local = json.loads(request.plan.files[LOCAL_RANK_TABLE])
        expected = []
        for rank in (0, 1):  # its instance's servers: each member's node, ranks continuing
            row = rows[request.role, rank]
            _, cards = decode_allocation(row.devices)
            expected.append({
                "server_id": address[row.node], "server_ip": address[row.node],
                "device": [{"device_id": str(c), "device_ip": f"29.18.{number[row.node]}.{c}",
                            "rank_id": str(rank * 2 + i)} for i, c in enumerate(cards)],
            })  # fmt: skip
        assert local["server_list"] == expected
        table = json.loads(request.plan.files[GLOBAL_RANK_TABLE])
        assert [g["server_count"] for g in table["server_group_list"]] == ["1", "2", "2"]
