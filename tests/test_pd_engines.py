"""Prefill/decode separation in the engine adapters: each KV connector's wiring per role, the
rank tables of ModelArts' Ascend deployment (seeds/000), and the PD example specs."""

import json
from pathlib import Path

import pytest

from contracts.engines import ContainerPlan, Mount, Placement, render, validate
from contracts.engines.pd import (
    KNOWN_CONNECTORS,
    PREFILL_KV_PARAMS,
    instance_hints,
    p2p_nccl_request_id,
    router_hints,
)
from contracts.engines.plan import PdMember
from contracts.engines.rank_table import (
    device_ip_placeholder,
    global_rank_table,
    local_rank_table,
    node_ports,
    preview_layout,
    with_device_ips,
)
from contracts.spec import ServiceSpec, parse_spec

GIB = 1024**3
DEPLOY_SPECS = Path(__file__).parent.parent / "deploy_specs"
PD_SPECS = sorted(DEPLOY_SPECS.glob("pd-*.json"))
ROLES = ("prefill", "decode")
# KVTransferConfig's fields in vLLM 0.32, which rejects any other (extra="forbid").
VLLM_032_FIELDS = {
    "kv_connector", "engine_id", "kv_buffer_device", "kv_role", "kv_port",
    "kv_connector_extra_config", "kv_connector_module_path", "enable_permute_local_kv",
    "kv_load_failure_policy",
}  # fmt: skip


def pd_spec(
    engine: str = "vllm",
    connector: str = "NixlConnector",
    prefill: dict | None = None,
    decode: dict | None = None,
    image: str | None = None,
    **pd,
) -> ServiceSpec:
    kind = "npu" if engine == "vllm-ascend" else "gpu"
    cards = {} if engine == "vllm-cpu" else {kind: 1}
    data: dict = {
        "name": "svc",
        "llm": {
            "engine": engine,
            "model": "m",
            "pd": {
                "prefill": prefill or cards,
                "decode": decode or cards,
                "kv_connector": connector,
                **pd,
            },
        },
    }
    if image:
        data["containers"] = [{"image": image}]
    return parse_spec(data)


def at(role: str, index: int = 0, devices: tuple[int, ...] = (0,), **more) -> Placement:
    return Placement(role=role, service="svc", pd_index=index, devices=devices, **more)


def process(role: str, port: int, **more) -> Placement:
    return Placement(
        in_container=False, host="127.0.0.1", port=port, role=role, service="svc", **more
    )


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def kv_config(plan: ContainerPlan) -> dict:
    return json.loads(flag(plan.args, "--kv-transfer-config"))


# ExampleConnector: a folder both roles share


@pytest.mark.parametrize("role", ROLES)
def test_example_connector_shares_the_service_volume_in_both_roles(role):
    plan = render(pd_spec("vllm-cpu", "ExampleConnector"), at(role, devices=()))
    assert kv_config(plan) == {
        "kv_connector": "ExampleConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"shared_storage_path": "/kv"},
    }
    assert Mount("volume", "/kv", "wharf-kv-svc", read_only=False) in plan.mounts


def test_example_connector_uses_the_shared_kv_dir_for_local_processes():
    spec = pd_spec("vllm-cpu", "ExampleConnector")
    for i, role in enumerate(ROLES):
        plan = render(spec, process(role, 41000 + i, kv_dir="/var/wharf/kv/svc"))
        assert kv_config(plan)["kv_connector_extra_config"] == {
            "shared_storage_path": "/var/wharf/kv/svc"
        }
        assert not [m for m in plan.mounts if m.kind == "volume"]


def test_an_ordinary_instance_has_no_kv_transfer():
    spec = pd_spec("vllm-cpu", "ExampleConnector")
    plan = render(spec, Placement())  # the preview of the service as a whole: no role
    assert "--kv-transfer-config" not in plan.args
    assert not [m for m in plan.mounts if m.kind == "volume"]


# NixlConnector


@pytest.mark.parametrize("role", ROLES)
def test_nixl_is_kv_both_with_a_side_channel_per_instance(role):
    plan = render(pd_spec(), at(role, node_ip="10.0.0.5"))
    assert kv_config(plan) == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    assert plan.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.5"
    assert plan.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "9000"  # the engine's 8000 + 1000


def test_nixl_side_channels_differ_between_local_processes():
    spec = pd_spec()
    prefill = render(spec, process("prefill", 41000))
    decode = render(spec, process("decode", 41007))
    assert prefill.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "42000"
    assert decode.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "42007"
    assert prefill.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"


def test_each_role_takes_its_own_parallelism_cards_and_shared_memory():
    spec = pd_spec(prefill={"gpu": 1}, decode={"gpu": 2, "tensor_parallel_size": 2})
    prefill = render(spec, at("prefill", devices=(0,)))
    decode = render(spec, at("decode", devices=(1, 2)))
    assert "--tensor-parallel-size" not in prefill.args
    assert flag(decode.args, "--tensor-parallel-size") == "2"
    assert (prefill.gpus, decode.gpus) == ((0,), (1, 2))
    assert (prefill.shm_size_bytes, decode.shm_size_bytes) == (GIB, 64 * GIB)


def test_user_env_overrides_the_kv_wiring():
    data = pd_spec().model_dump(mode="json")
    data["containers"] = [{"env": [{"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "value": "nic0"}]}]
    plan = render(parse_spec(data), at("prefill"))
    assert plan.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "nic0"


# vLLM's MooncakeConnector


def test_mooncake_names_its_engines_and_bootstrap_ports():
    spec = pd_spec(connector="MooncakeConnector")
    prefill = render(spec, at("prefill", index=1))
    decode = render(spec, at("decode"))
    assert kv_config(prefill) == {
        "kv_connector": "MooncakeConnector",
        "kv_role": "kv_producer",
        "engine_id": "svc-prefill-1",
    }
    assert kv_config(decode)["kv_role"] == "kv_consumer"
    assert prefill.env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == "9000"
    hints = instance_hints("MooncakeConnector", at("prefill", index=1), 8000)
    assert hints == {"engine_id": "svc-prefill-1", "bootstrap_port": 9000}


# P2pNcclConnector


def test_p2p_nccl_ranks_ports_and_proxy():
    spec = pd_spec(connector="P2pNcclConnector", image="vllm/vllm-openai:v0.10.2")
    prefill = kv_config(render(spec, process("prefill", 41000, router_ip="10.0.0.1")))
    decode = kv_config(render(spec, process("decode", 41001, router_ip="10.0.0.1")))
    assert (prefill["kv_role"], prefill["kv_rank"]) == ("kv_producer", 0)
    assert (decode["kv_role"], decode["kv_rank"]) == ("kv_consumer", 1)
    assert prefill["kv_parallel_size"] == decode["kv_parallel_size"] == 2
    assert (prefill["kv_port"], decode["kv_port"]) == (42000, 42001)
    assert prefill["kv_connector_extra_config"] == {
        "proxy_ip": "10.0.0.1",
        "proxy_port": "30001",
        "http_port": "41000",
        "send_type": "PUT_ASYNC",
    }
    assert decode["kv_buffer_size"] > prefill["kv_buffer_size"]  # decode receives


def test_p2p_nccl_request_ids_name_both_peers():
    rid = p2p_nccl_request_id("10.0.0.2:42000", "10.0.0.3:42001", "ab12")
    assert rid == "___prefill_addr_10.0.0.2:42000___decode_addr_10.0.0.3:42001_ab12"
    assert instance_hints("P2pNcclConnector", at("decode"), 8000) == {"kv_port": 9000}


@pytest.mark.parametrize("connector", ["P2pNcclConnector", "MooncakeConnector"])
def test_connectors_the_gateway_cannot_route_yet_are_refused(connector):
    errors = validate(pd_spec(connector=connector, image="vllm/vllm-openai:v0.10.2"))
    assert list(errors) == ["llm.pd.kv_connector"]
    assert "does not route" in errors["llm.pd.kv_connector"][0]


@pytest.mark.parametrize("connector", ["ExampleConnector", "NixlConnector", "MooncakeConnector"])
def test_configs_for_the_default_image_use_only_fields_it_knows(connector):
    for role in ROLES:
        assert set(kv_config(render(pd_spec(connector=connector), at(role)))) <= VLLM_032_FIELDS


# vllm-ascend: Mooncake


def test_ascend_mooncake_knows_both_sides_parallelism():
    spec = pd_spec(
        "vllm-ascend", "MooncakeConnectorV1",
        prefill={"npu": 2, "tensor_parallel_size": 2},
        decode={"npu": 4, "tensor_parallel_size": 4},
    )  # fmt: skip
    prefill = render(spec, at("prefill", devices=(4, 5)))
    decode = render(spec, at("decode", devices=(0, 1, 2, 3)))
    sizes = {"prefill": {"dp_size": 1, "tp_size": 2}, "decode": {"dp_size": 1, "tp_size": 4}}
    assert kv_config(prefill) == {
        "kv_connector": "MooncakeConnectorV1",
        "kv_role": "kv_producer",
        "kv_port": 9000,
        "engine_id": "svc-prefill-0",
        "kv_connector_extra_config": sizes,
    }
    assert kv_config(decode)["kv_role"] == "kv_consumer"
    assert kv_config(decode)["engine_id"] == "svc-decode-0"
    assert set(kv_config(prefill)) <= VLLM_032_FIELDS
    assert flag(decode.args, "--tensor-parallel-size") == "4"
    assert prefill.env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"  # a container numbers from 0
    assert decode.env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3"
    assert prefill.device_paths[:2] == ("/dev/davinci4", "/dev/davinci5")
    assert prefill.files == {}  # no rank tables unless asked for


# Rank tables (seeds/000)

LAYOUT = (
    PdMember("decode", 0, "10.0.0.18", (6, 7), 8089, ("29.0.0.56", "29.0.0.72")),
    PdMember("prefill", 0, "10.0.0.18", (4, 5), 8088, ("10.0.0.22", "10.0.0.23")),
)


def test_global_rank_table_has_scheduler_prefill_and_decode_groups():
    table = global_rank_table(LAYOUT, "10.0.0.18")
    assert (table["version"], table["status"]) == ("1.0", "completed")
    groups = table["server_group_list"]
    assert [g["group_id"] for g in groups] == ["0", "1", "2"]
    assert groups[0]["server_list"] == [{"server_id": "10.0.0.18", "server_ip": "10.0.0.18"}]
    assert [g["server_count"] for g in groups] == ["1", "1", "1"]
    assert groups[1]["server_list"][0]["device"] == [
        {"device_id": "4", "device_ip": "10.0.0.22", "rank_id": "0"},
        {"device_id": "5", "device_ip": "10.0.0.23", "rank_id": "1"},
    ]
    assert groups[2]["server_list"][0]["device"] == [
        {"device_id": "6", "device_ip": "29.0.0.56", "rank_id": "0"},
        {"device_id": "7", "device_ip": "29.0.0.72", "rank_id": "1"},
    ]


def test_local_rank_table_is_the_instance_entry_as_group_zero():
    table = global_rank_table(LAYOUT, "10.0.0.18")
    local = local_rank_table(LAYOUT[0])
    assert local["group_id"] == "0" and local["server_count"] == "1"
    assert local["server_list"] == table["server_group_list"][2]["server_list"]


def test_node_ports_follow_the_global_order():
    more = (*LAYOUT, PdMember("prefill", 1, "10.0.0.19", (0,), 8090))
    assert node_ports(more) == "8088,8090,8089"


def test_unknown_device_ips_show_how_to_read_them_and_can_be_filled_in():
    bare = PdMember("prefill", 0, "10.0.0.18", (4, 5), 8088)
    device = local_rank_table(bare)["server_list"][0]["device"][1]
    assert device["device_ip"] == device_ip_placeholder(5) == "<hccn_tool -i 5 -ip -g>"
    other = PdMember("decode", 0, "10.0.0.19", (0,), 8089)
    filled = with_device_ips([bare, other], "10.0.0.18", {4: "1.1.1.4", 5: "1.1.1.5"})
    assert filled[0].device_ips == ("1.1.1.4", "1.1.1.5")
    assert filled[1] == other


def test_preview_layout_gives_the_others_free_cards_prefill_first():
    own = PdMember("decode", 0, "localhost", (6, 7), 8000)
    layout = preview_layout({"prefill": (2, 2), "decode": (1, 2)}, own)
    assert [(m.role, m.index, m.device_ids) for m in layout] == [
        ("prefill", 0, (0, 1)), ("prefill", 1, (2, 3)), ("decode", 0, (6, 7)),
    ]  # fmt: skip


def ranktable_spec() -> ServiceSpec:
    return parse_spec(json.loads((DEPLOY_SPECS / "pd-vllm-ascend-ranktable.json").read_text()))


def test_ascend_rank_table_files_and_env_from_the_worker_layout():
    placement = at("decode", devices=(6, 7), pd_layout=LAYOUT, router_ip="10.0.0.18")
    plan = render(ranktable_spec(), placement)
    glob = json.loads(plan.files["/etc/wharf/ranktable/global.json"])
    local = json.loads(plan.files["/etc/wharf/ranktable/local.json"])
    assert glob == global_rank_table(LAYOUT, "10.0.0.18")
    assert local == local_rank_table(LAYOUT[0])
    assert plan.env["GLOBAL_RANK_TABLE_FILE_PATH"] == "/etc/wharf/ranktable/global.json"
    assert plan.env["RANK_TABLE_FILE_PATH"] == "/etc/wharf/ranktable/local.json"
    assert plan.env["NODE_PORTS"] == "8088,8089"


def test_ascend_rank_tables_in_the_preview_are_seed_shaped():
    plan = render(ranktable_spec(), at("prefill", devices=(4, 5)))
    glob = json.loads(plan.files["/etc/wharf/ranktable/global.json"])
    prefill, decode = (g["server_list"] for g in glob["server_group_list"][1:])
    assert [d["device_id"] for d in prefill[0]["device"]] == ["4", "5"]
    assert [d["device_id"] for d in decode[0]["device"]] == ["0", "1"]
    local = json.loads(plan.files["/etc/wharf/ranktable/local.json"])
    assert local["server_list"] == prefill


# Validation and the router


def test_an_unknown_connector_is_named_with_the_engines_choices():
    errors = validate(pd_spec("vllm-cpu", "NixlConnector"))
    assert list(errors) == ["llm.pd.kv_connector"]
    assert "vllm-cpu" in errors["llm.pd.kv_connector"][0]
    assert "ExampleConnector" in errors["llm.pd.kv_connector"][0]
    errors = validate(pd_spec("vllm-ascend", "NixlConnector"))
    assert "MooncakeConnectorV1" in errors["llm.pd.kv_connector"][0]


@pytest.mark.parametrize(
    "engine",
    [e for e in KNOWN_CONNECTORS if e != "vllm"],  # vllm: see P2pNccl above
)
def test_every_known_connector_validates_and_renders(engine):
    for connector in KNOWN_CONNECTORS[engine]:
        spec = pd_spec(engine, connector)
        assert validate(spec) == {}
        for role in ROLES:
            assert kv_config(render(spec, at(role)))["kv_connector"] == connector


def test_router_hints_per_connector():
    assert router_hints("ExampleConnector") == {}
    nixl = router_hints("NixlConnector")
    assert nixl["kv_transfer_params"] is True
    assert nixl["prefill_kv_transfer_params"] == PREFILL_KV_PARAMS
    assert PREFILL_KV_PARAMS["do_remote_decode"] is True
    assert PREFILL_KV_PARAMS["do_remote_prefill"] is False
    assert router_hints("MooncakeConnectorV1") == nixl
    assert router_hints("MooncakeConnector") == {"kv_transfer_params": True, "transfer_id": True}
    assert router_hints("P2pNcclConnector") == {"request_id": "p2p_nccl"}


# The example specs


@pytest.mark.parametrize("path", PD_SPECS, ids=lambda p: p.name)
@pytest.mark.parametrize("role", ROLES)
def test_pd_example_specs_render_per_role(path, role):
    spec = parse_spec(json.loads(path.read_text()))
    assert spec.llm and spec.llm.pd and validate(spec) == {}
    side = spec.llm.pd.role(role)
    devices = tuple(range(side.gpu or side.npu))
    plan = render(spec, at(role, devices=devices))
    config = kv_config(plan)
    assert config["kv_connector"] == spec.llm.pd.kv_connector
    tp = side.tensor_parallel_size
    assert ("--tensor-parallel-size" in plan.args) == (tp > 1)
    if spec.llm.engine == "vllm":
        assert plan.gpus == devices


def test_the_cpu_example_matches_the_wiring_verified_on_this_machine():
    spec = parse_spec(json.loads((DEPLOY_SPECS / "pd-vllm-cpu-1p1d.json").read_text()))
    assert spec.llm and spec.llm.model == "tiny-llama" and spec.llm.max_model_len == 512
    for role in ROLES:
        plan = render(spec, at(role, devices=()))
        assert flag(plan.args, "--kv-transfer-config") == (
            '{"kv_connector":"ExampleConnector","kv_role":"kv_both",'
            '"kv_connector_extra_config":{"shared_storage_path":"/kv"}}'
        )
        assert "--enforce-eager" in plan.args


def test_pd_examples_cover_each_pd_engine_and_the_rank_tables():
    specs = [json.loads(p.read_text())["llm"] for p in PD_SPECS]
    assert {s["engine"] for s in specs} == {"vllm", "vllm-cpu", "vllm-ascend"}
    assert any(s["pd"].get("rank_table") for s in specs)


@pytest.mark.parametrize(
    ("engine", "connector", "in_container", "host_network"),
    [
        ("vllm", "NixlConnector", True, True),  # binds the address it advertises
        ("vllm-ascend", "MooncakeConnectorV1", True, True),
        ("vllm", "ExampleConnector", True, False),  # a shared folder: bridged
        ("vllm", "NixlConnector", False, False),  # a local process is on the host already
    ],
)
def test_network_kv_connectors_run_on_the_nodes_network(engine, connector, in_container,
                                                        host_network):  # fmt: skip
    placement = at("prefill", in_container=in_container, kv_port=31001, node_ip="10.0.0.5")
    plan = render(pd_spec(engine, connector), placement)
    assert plan.host_network is host_network
    if connector == "NixlConnector":
        assert plan.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "31001"  # the scheduler's port
