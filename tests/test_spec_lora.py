"""LoRA adapters in the spec (`llm.lora`): the schema and rules, what each engine renders, where
nodes and pods find the adapters, and the memory will-it-fit sets aside for them."""

from __future__ import annotations

import pytest

from contracts import sizing
from contracts.engines import render, validate
from contracts.engines.plan import Placement
from contracts.kube.pod_template import staged_sources
from contracts.spec import SpecError, parse_spec
from contracts.spec_facts import adapter_names, model_refs
from workers.models.provisioning import check_model_store, object_sources
from workers.runtimes.base import InstanceError

ADAPTERS = [{"name": "sql", "model": "tiny-sql-lora"},
            {"name": "chat", "model": "oss://bucket/adapters/chat/"}]  # fmt: skip


def spec(engine: str = "vllm-cpu", lora: dict | None = None, **llm) -> dict:
    cards = {"npu": 1} if engine == "vllm-ascend" else {"gpu": 1} if engine != "vllm-cpu" else {}
    return {
        "name": "assistant", "metadata": cards,
        "llm": {"engine": engine, "model": "tiny", "lora": lora or {"adapters": ADAPTERS}, **llm},
    }  # fmt: skip


def errors(data: dict) -> dict[str, list[str]]:
    try:
        parsed = parse_spec(data)
    except SpecError as exc:
        return exc.errors
    return validate(parsed)


# ---- schema and rules ------------------------------------------------------------------------

BAD = [
    ("an engine without adapters", spec("bladellm"), "llm.lora", "serves no LoRA adapters"),
    ("prefill/decode", {**spec(), "llm": {**spec()["llm"], "pd": {
        "prefill": {"instance": 1}, "decode": {"instance": 1},
        "kv_connector": "ExampleConnector"}}}, "llm.lora", "prefill/decode"),
    ("a ':' in a name", spec(lora={"adapters": [{"name": "a:b", "model": "x"}]}),
     "llm.lora.adapters[0].name", "no ':'"),
    ("a name twice", spec(lora={"adapters": [{"name": "a", "model": "x"},
                                             {"name": "a", "model": "y"}]}),
     "llm.lora.adapters", "a given twice"),
    ("the service's name", spec(lora={"adapters": [{"name": "assistant", "model": "x"}]}),
     "llm.lora.adapters[0].name", "names the base model"),
    ("the served name", spec(lora={"adapters": [{"name": "tiny-chat", "model": "x"}]},
                             served_model_name="tiny-chat"),
     "llm.lora.adapters[0].name", "names the base model"),
    ("a model that is no model", spec(lora={"adapters": [{"name": "a", "model": "ftp://x"}]}),
     "llm.lora.adapters[0].model", "unknown scheme"),
    ("a rank vLLM has not", spec(lora={"adapters": [], "max_rank": 12}), "llm.lora.max_rank",
     "8, 16, 32"),
    ("an unknown field", spec(lora={"adapters": [], "max_cpu_loras": 4}),
     "llm.lora.max_cpu_loras", "does not support this field"),
    ("TGI's slots", spec("tgi", lora={"adapters": ADAPTERS, "max_loras": 2}),
     "llm.lora.max_loras", "TGI sizes"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "data", "field", "words"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_lora_section_is_refused_naming_the_field(case, data, field, words):
    found = errors(data)
    assert field in found, found
    assert any(words in message for message in found[field]), found[field]


@pytest.mark.parametrize("engine", ["vllm", "vllm-cpu", "vllm-ascend", "tgi"])
def test_the_engines_with_adapters_take_them(engine):
    assert errors(spec(engine)) == {}


def test_facts_name_every_model_the_spec_serves():
    data = spec(speculative={"model": "/drafts/tiny", "method": "draft_model"})
    parsed = parse_spec(data)
    assert adapter_names(parsed) == ("sql", "chat")
    assert model_refs(parsed) == [
        ("llm.model", "tiny"), ("llm.speculative.model", "/drafts/tiny"),
        ("llm.lora.adapters[0].model", "tiny-sql-lora"),
        ("llm.lora.adapters[1].model", "oss://bucket/adapters/chat/"),
    ]  # fmt: skip


# ---- rendering --------------------------------------------------------------------------------


def test_vllm_serves_each_adapter_by_its_name_from_where_the_node_put_it():
    data = spec(lora={"adapters": ADAPTERS, "max_loras": 4, "max_rank": 16})
    placement = Placement(staged={"oss://bucket/adapters/chat/": "/cache/oss/chat@1"})
    plan = render(parse_spec(data), placement)
    args = plan.args
    start = args.index("--lora-modules")
    assert args[start - 1] == "--enable-lora"
    assert args[start + 1: start + 3] == ["sql=/models/tiny-sql-lora",
                                          "chat=/models/oss/bucket/adapters/chat"]  # fmt: skip
    assert args[args.index("--max-loras") + 1] == "4"
    assert args[args.index("--max-lora-rank") + 1] == "16"
    mounts = {m.target: m.source for m in plan.mounts}
    assert mounts["/models/tiny-sql-lora"] == "/var/lib/wharf/models/tiny-sql-lora"
    assert mounts["/models/oss/bucket/adapters/chat"] == "/cache/oss/chat@1"
    assert all(m.read_only for m in plan.mounts)


def test_vllm_with_lora_and_no_adapters_yet_leaves_the_engines_defaults():
    args = render(parse_spec(spec(lora={"adapters": []}))).args
    assert "--enable-lora" in args
    assert not {"--lora-modules", "--max-loras", "--max-lora-rank"} & set(args)
    assert "--enable-lora" not in render(parse_spec({**spec(), "llm": {
        "engine": "vllm-cpu", "model": "tiny"}})).args  # fmt: skip


def test_vllm_ascend_renders_the_same_flags():
    args = render(parse_spec(spec("vllm-ascend"))).args
    assert args[args.index("--lora-modules") + 1] == "sql=/models/tiny-sql-lora"


def test_tgi_loads_its_adapters_at_start_by_name():
    args = render(parse_spec(spec("tgi"))).args
    assert args[args.index("--lora-adapters") + 1] == (
        "sql=/models/tiny-sql-lora,chat=/models/oss/bucket/adapters/chat"
    )


def test_a_node_keeps_the_adapters_in_one_folder_engines_see_while_they_run():
    placement = Placement(adapters_dir="/wharf/adapters/assistant",
                          staged={"oss://bucket/adapters/chat/": "/cache/chat@1"})  # fmt: skip
    plan = render(parse_spec(spec()), placement)
    modules = plan.args[plan.args.index("--lora-modules") + 1 :][:2]
    assert [m.split("=")[1].rsplit("-", 1)[0] for m in modules] == ["/adapters/sql",
                                                                     "/adapters/chat"]  # fmt: skip
    (folder,) = [m for m in plan.mounts if m.target == "/adapters"]
    assert (folder.source, folder.read_only) == ("/wharf/adapters/assistant", True)
    assert plan.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    # Without the folder (the preview, a pod) the runtime routes stay off.
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in render(parse_spec(spec())).env
    local = render(parse_spec(spec()), Placement(in_container=False, adapters_dir="/w/a"))
    assert local.args[local.args.index("--lora-modules") + 1].startswith("sql=/w/a/sql-")


def test_adapters_are_not_in_the_spec_hash_where_engines_load_them_while_running():
    def hashed(engine: str, adapters: list) -> str:
        return parse_spec(spec(engine, lora={"adapters": adapters})).spec_hash()

    for engine in ("vllm", "vllm-cpu", "vllm-ascend"):
        assert hashed(engine, ADAPTERS) == hashed(engine, ADAPTERS[:1])
    assert hashed("tgi", ADAPTERS) != hashed("tgi", ADAPTERS[:1])  # TGI loads them at start
    # The slots are engine flags: changing them restarts.
    with_slots = parse_spec(spec(lora={"adapters": ADAPTERS, "max_loras": 3})).spec_hash()
    assert with_slots != hashed("vllm-cpu", ADAPTERS)


# ---- where nodes and pods find them ----------------------------------------------------------


def test_nodes_stage_object_storage_adapters_and_check_store_ones(tmp_path):
    parsed = parse_spec(spec())
    assert [s.uri for s in object_sources(parsed)] == ["oss://bucket/adapters/chat/"]
    (tmp_path / "tiny").mkdir()
    with pytest.raises(InstanceError, match="'tiny-sql-lora' is not in this node's model store"):
        check_model_store(parsed, tmp_path)
    (tmp_path / "tiny-sql-lora").mkdir()
    check_model_store(parsed, tmp_path)


def test_pods_stage_object_storage_adapters_in_init_containers():
    (source,) = staged_sources(parse_spec(spec()))
    assert (source.uri, source.where) == (
        "oss://bucket/adapters/chat/",
        "llm.lora.adapters[1].model",
    )


# ---- will it fit --------------------------------------------------------------------------------

LLAMA3_8B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
}  # fmt: skip


def test_adapter_slots_take_their_buffers_out_of_the_kv_cache():
    shape = sizing.read_shape(LLAMA3_8B)
    # Per slot and rank: (4096 in + 6144 out) qkv + (4096 + 4096) o + (4096 + 28672) gate/up
    # + (14336 + 4096) down = 69,632 elements a layer, 32 layers, 2 bytes.
    assert sizing.lora_bytes(shape, 1, 1) == 69_632 * 32 * 2
    assert sizing.lora_bytes(shape, 4, 16, tp=2) == 4 * 16 * 69_632 * 32 * 2 // 2
    assert sizing.lora_bytes(shape, 0, 16) == 0
    plain = sizing.estimate(LLAMA3_8B, card_memory_gb=80, cards=1)
    served = sizing.estimate(LLAMA3_8B, card_memory_gb=80, cards=1, lora=(8, 64))
    assert served.lora_bytes_per_card == 8 * 64 * 69_632 * 32 * 2  # 2.1 GiB
    assert plain.kv_cache_bytes_per_card - served.kv_cache_bytes_per_card == (
        served.lora_bytes_per_card
    )
    assert served.kv_tokens < plain.kv_tokens


# ---- what the gateways are told ---------------------------------------------------------------


@pytest.mark.django_db
def test_the_routing_snapshot_names_each_services_adapters():
    from controlplane.services.models import Service
    from controlplane.services.routing import build_snapshot
    from tests.api_support import default_workspace

    Service.objects.create(workspace=default_workspace(), name="assistant", spec=spec())
    Service.objects.create(workspace=default_workspace(), name="plain", spec={
        **spec(), "name": "plain", "llm": {"engine": "vllm-cpu", "model": "tiny"}})  # fmt: skip
    services = build_snapshot().services
    assert services["assistant"].adapters == ("sql", "chat")
    assert services["plain"].adapters == ()
