"""Rank tables of prefill/decode instances across hosts (llm.pd.rank_table with unit.size > 1,
contracts.engines.rank_table): every member of an instance is a server of its group with its
own node and cards, rank ids continue across an instance's servers, every member reads its
instance's servers as its local table, NODE_PORTS lists the leaders' ports; what each member
of vLLM-Ascend is started with; on Kubernetes, a LeaderWorkerSet group's pods as one
instance; the spec accepted on every runtime."""

from __future__ import annotations

import json
import random

import pytest

from contracts.engines import render
from contracts.engines.plan import GangMember, PdMember, Placement
from contracts.engines.rank_table import (
    global_rank_table,
    instance_of,
    local_rank_table,
    node_ports,
)
from contracts.engines.vllm_ascend import GLOBAL_RANK_TABLE, LOCAL_RANK_TABLE
from contracts.kube import lws
from contracts.kube.manifests import render as render_manifests
from contracts.kube.rank_tables import tables
from contracts.spec import parse_spec
from contracts.spec_facts import replicas
from tests.kube_manifest_support import OWNER, SETTINGS, keys_for
from tests.test_engine_gang import PD_RANK_TABLES
from tests.test_kube_rank_tables import HASH, pod

SCHEDULER = "10.0.0.100"


def instance(role: str, index: int, hosts: list[str], cards: range, port: int) -> list[PdMember]:
    """One instance's members, one per host, each on `cards` of its host, card addresses
    made from the host's last number (10.0.0.H card C -> 29.0.H.C)."""
    return [
        PdMember(
            role=role, index=index, host_ip=host, device_ids=tuple(cards),
            port=port if rank == 0 else 0, rank=rank,
            device_ips=tuple(f"29.0.{host.rsplit('.', 1)[1]}.{c}" for c in cards),
        )  # fmt: skip
        for rank, host in enumerate(hosts)
    ]  # fmt: skip


def servers(table: dict) -> list[tuple[str, list[tuple[str, str]]]]:
    """A group's (or a local table's) servers as (server_id, [(device_id, rank_id), ...])."""
    return [
        (s["server_id"], [(d["device_id"], d["rank_id"]) for d in s["device"]])
        for s in table["server_list"]
    ]


def ranked(host: str, cards: range, first: int) -> tuple[str, list[tuple[str, str]]]:
    return host, [(str(c), str(first + i)) for i, c in enumerate(cards)]


ONE_HOST = [  # unit.size 1: seeds/000's 1p1d on one node, as before
    *instance("decode", 0, ["10.0.0.18"], range(6, 8), 8089),
    *instance("prefill", 0, ["10.0.0.18"], range(4, 6), 8088),
]
TWO_HOSTS = [  # 1 prefill + 1 decode, each across 2 hosts of 8 cards
    *instance("prefill", 0, ["10.0.0.1", "10.0.0.2"], range(8), 8000),
    *instance("decode", 0, ["10.0.0.3", "10.0.0.4"], range(8), 8001),
]
TWO_PREFILL = [  # 2 prefill (sharing two hosts, 4 cards each) + 1 decode, each across 2 hosts
    *instance("prefill", 0, ["10.0.0.1", "10.0.0.2"], range(4), 8000),
    *instance("prefill", 1, ["10.0.0.1", "10.0.0.2"], range(4, 8), 8002),
    *instance("decode", 0, ["10.0.0.3", "10.0.0.4"], range(4), 8001),
]

# (layout, group "1"'s servers, group "2"'s servers, NODE_PORTS)
GLOBAL = [
    pytest.param(
        ONE_HOST,
        [ranked("10.0.0.18", range(4, 6), 0)],
        [ranked("10.0.0.18", range(6, 8), 0)],
        "8088,8089",
        id="one-host-unchanged",
    ),
    pytest.param(
        TWO_HOSTS,
        [ranked("10.0.0.1", range(8), 0), ranked("10.0.0.2", range(8), 8)],
        [ranked("10.0.0.3", range(8), 0), ranked("10.0.0.4", range(8), 8)],
        "8000,8001",
        id="1p1d-2-hosts-x-8-cards",
    ),
    pytest.param(
        TWO_PREFILL,
        [ranked("10.0.0.1", range(4), 0), ranked("10.0.0.2", range(4), 4),
         ranked("10.0.0.1", range(4, 8), 0), ranked("10.0.0.2", range(4, 8), 4)],
        [ranked("10.0.0.3", range(4), 0), ranked("10.0.0.4", range(4), 4)],
        "8000,8002,8001",
        id="2p1d-2-hosts-each",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("layout", "prefill", "decode", "ports"), GLOBAL)
def test_global_table_lists_every_member_as_a_server_with_ranks_across_its_instance(
    layout, prefill, decode, ports
):
    shuffled = random.Random(7).sample(layout, len(layout))  # the rows' order does not matter
    table = global_rank_table(shuffled, SCHEDULER)
    scheduler, *groups = table["server_group_list"]
    assert scheduler["server_list"] == [{"server_id": SCHEDULER, "server_ip": SCHEDULER}]
    assert [servers(g) for g in groups] == [prefill, decode]
    assert [g["server_count"] for g in groups] == [str(len(prefill)), str(len(decode))]
    assert node_ports(shuffled) == ports  # the leaders' serving ports only


def test_one_host_tables_are_byte_for_byte_as_before():
    before_global = {"version": "1.0", "status": "completed", "server_group_list": [
        {"group_id": "0", "server_count": "1",
         "server_list": [{"server_id": SCHEDULER, "server_ip": SCHEDULER}]},
        {"group_id": "1", "server_count": "1", "server_list": [
            {"server_id": "10.0.0.18", "server_ip": "10.0.0.18", "device": [
                {"device_id": "4", "device_ip": "29.0.18.4", "rank_id": "0"},
                {"device_id": "5", "device_ip": "29.0.18.5", "rank_id": "1"}]}]},
        {"group_id": "2", "server_count": "1", "server_list": [
            {"server_id": "10.0.0.18", "server_ip": "10.0.0.18", "device": [
                {"device_id": "6", "device_ip": "29.0.18.6", "rank_id": "0"},
                {"device_id": "7", "device_ip": "29.0.18.7", "rank_id": "1"}]}]},
    ]}  # fmt: skip
    assert json.dumps(global_rank_table(ONE_HOST, SCHEDULER)) == json.dumps(before_global)
    decode = before_global["server_group_list"][2]["server_list"]
    before_local = {"version": "1.0", "status": "completed", "group_id": "0",
                    "server_count": "1", "server_list": decode}  # fmt: skip
    assert json.dumps(local_rank_table(ONE_HOST[0])) == json.dumps(before_local)


# (layout, the member whose local table it is: (role, index, rank), its servers)
LOCAL = [
    pytest.param(ONE_HOST, ("decode", 0, 0), [ranked("10.0.0.18", range(6, 8), 0)],
                 id="one-host-its-own-entry"),
    pytest.param(TWO_HOSTS, ("prefill", 0, 0),
                 [ranked("10.0.0.1", range(8), 0), ranked("10.0.0.2", range(8), 8)],
                 id="leader-reads-its-instances-servers"),
    pytest.param(TWO_HOSTS, ("prefill", 0, 1),
                 [ranked("10.0.0.1", range(8), 0), ranked("10.0.0.2", range(8), 8)],
                 id="member-1-reads-the-same"),
    pytest.param(TWO_PREFILL, ("prefill", 1, 1),
                 [ranked("10.0.0.1", range(4, 8), 0), ranked("10.0.0.2", range(4, 8), 4)],
                 id="second-prefill-not-the-first"),
    pytest.param(TWO_PREFILL, ("decode", 0, 1),
                 [ranked("10.0.0.3", range(4), 0), ranked("10.0.0.4", range(4), 4)],
                 id="decode-member-1"),
]  # fmt: skip


@pytest.mark.parametrize(("layout", "key", "expected"), LOCAL)
def test_local_table_is_the_members_instance_as_group_zero(layout, key, expected):
    member = next(m for m in layout if (m.role, m.index, m.rank) == key)
    local = local_rank_table(*instance_of(layout, member))
    assert (local["group_id"], local["server_count"]) == ("0", str(len(expected)))
    assert servers(local) == expected
    group = global_rank_table(layout, SCHEDULER)["server_group_list"][1 if key[0] == "prefill"
                                                                      else 2]  # fmt: skip
    assert all(server in group["server_list"] for server in local["server_list"])


def test_a_member_missing_from_the_layout_reads_only_itself():
    stray = PdMember("decode", 3, "10.0.0.9", (0, 1), 0, rank=1)
    assert instance_of(TWO_HOSTS, stray) == [stray]
    assert servers(local_rank_table(stray)) == [ranked("10.0.0.9", range(2), 2)]


# A vLLM-Ascend member as the worker starts it

# The preview tests' spec, its model a folder the worker would mount.
PD_ACROSS_HOSTS = {**PD_RANK_TABLES, "llm": {**PD_RANK_TABLES["llm"], "model": "/models/r1"}}


def ascend_spec():
    return parse_spec(PD_ACROSS_HOSTS)


def decode_member(rank: int) -> Placement:
    """Decode member `rank` of TWO_HOSTS as workers.nodes.starter wires it."""
    host = ("10.0.0.3", "10.0.0.4")[rank]
    return Placement(
        role="decode", pd_index=0, devices=tuple(range(8)), pd_layout=tuple(TWO_HOSTS),
        node_ip=host, router_ip=SCHEDULER, port=8001 if rank == 0 else None,
        gang=GangMember(rank, 2, "10.0.0.3", 29500, host),
    )  # fmt: skip


@pytest.mark.parametrize(("rank", "host"), [(0, "10.0.0.3"), (1, "10.0.0.4")])
def test_each_member_reads_its_instances_tables_and_binds_hccl_on_its_node(rank, host):
    plan = render(ascend_spec(), decode_member(rank))
    assert {k: plan.env[k] for k in ("GLOBAL_RANK_TABLE_FILE_PATH", "RANK_TABLE_FILE_PATH",
                                     "NODE_PORTS", "HCCL_IF_IP", "VLLM_HOST_IP")} == {
        "GLOBAL_RANK_TABLE_FILE_PATH": GLOBAL_RANK_TABLE,
        "RANK_TABLE_FILE_PATH": LOCAL_RANK_TABLE,
        "NODE_PORTS": "8000,8001",
        "HCCL_IF_IP": host,
        "VLLM_HOST_IP": host,
    }  # fmt: skip
    assert json.loads(plan.files[GLOBAL_RANK_TABLE]) == global_rank_table(TWO_HOSTS, SCHEDULER)
    local = json.loads(plan.files[LOCAL_RANK_TABLE])
    assert servers(local) == [ranked("10.0.0.3", range(8), 0), ranked("10.0.0.4", range(8), 8)]
    assert plan.args[plan.args.index("--node-rank") + 1] == str(rank)
    assert ("--headless" in plan.args) is (rank == 1)


def test_every_member_of_an_instance_gets_the_same_tables():
    leader, member = (render(ascend_spec(), decode_member(rank)) for rank in (0, 1))
    assert leader.files == member.files


# On Kubernetes: a LeaderWorkerSet group's pods are one instance


def lws_pod(name: str, role: str, group: int, worker: int, ip: str, created: str) -> dict:
    """A pod of group `group` of the role's LeaderWorkerSet, as LWS labels it, with cards 0
    and 1 (the device plugin's annotation, tests/test_kube_rank_tables.py)."""
    found = pod(name, role, ip, created=f"2026-11-25T10:00:{created}Z", spec_hash=HASH)
    found["metadata"]["labels"] |= {
        lws.LABEL_SET_NAME: f"svc-{role}",
        lws.LABEL_GROUP_INDEX: str(group),
        lws.LABEL_WORKER_INDEX: str(worker),
    }
    return found


GROUPS = [  # 2 prefill groups and 1 decode group of 2 pods each, workers seen first
    lws_pod("svc-prefill-0-1", "prefill", 0, 1, "10.244.1.2", "01"),
    lws_pod("svc-prefill-0", "prefill", 0, 0, "10.244.1.1", "02"),
    lws_pod("svc-prefill-1", "prefill", 1, 0, "10.244.2.1", "03"),
    lws_pod("svc-prefill-1-1", "prefill", 1, 1, "10.244.2.2", "04"),
    lws_pod("svc-decode-0", "decode", 0, 0, "10.244.3.1", "05"),
    lws_pod("svc-decode-0-1", "decode", 0, 1, "10.244.3.2", "06"),
]


def test_a_leaderworkerset_groups_pods_are_one_instances_servers():
    found = tables(GROUPS, HASH, ["prefill", "decode"], size=2)
    assert (found.complete, found.waiting) == (True, "")
    table = json.loads(found.data["global.json"])
    prefill, decode = table["server_group_list"][1:]
    assert servers(prefill) == [
        ranked("10.244.1.1", range(2), 0), ranked("10.244.1.2", range(2), 2),
        ranked("10.244.2.1", range(2), 0), ranked("10.244.2.2", range(2), 2),
    ]  # fmt: skip
    assert servers(decode) == [ranked("10.244.3.1", range(2), 0),
                               ranked("10.244.3.2", range(2), 2)]  # fmt: skip
    for name in ("svc-prefill-1", "svc-prefill-1-1"):  # each pod: its group's servers
        local = json.loads(found.data[f"{name}.json"])
        assert servers(local) == servers(prefill)[2:] and local["status"] == "completed"


def test_a_group_short_of_its_pods_keeps_the_tables_initializing():
    found = tables(GROUPS[:5], HASH, ["prefill", "decode"], size=2)
    assert not found.complete
    assert found.waiting == "decode instance 0 has 1 of its 2 pods ready"
    assert json.loads(found.data["global.json"])["status"] == "initializing"


def test_rank_tables_across_hosts_render_on_kubernetes():
    spec = ascend_spec()
    counts = replicas(spec)
    objects = render_manifests(spec.name, spec, 1, counts, SETTINGS, OWNER, keys_for(counts))
    sets = [o for o in objects if o["kind"] == lws.KIND]
    assert len(sets) == 2 and any(o["kind"] == "ConfigMap" for o in objects)
    for template in ("leaderTemplate", "workerTemplate"):  # every pod waits for its tables
        for found in sets:
            pod_spec = found["spec"]["leaderWorkerTemplate"][template]["spec"]
            assert [c["name"] for c in pod_spec["initContainers"]] == ["rank-tables"]


@pytest.mark.django_db
@pytest.mark.parametrize("runtime", ["process", "docker", "kubernetes"])
def test_the_api_saves_rank_tables_across_hosts(api, settings, runtime):
    settings.WHARF_RUNTIME = runtime
    answer = api.post("/api/v1/services", PD_ACROSS_HOSTS, format="json")
    assert answer.status_code == 201, answer.content
