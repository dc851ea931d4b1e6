"""The spec's `unit` block and pipeline parallelism (contracts.spec_unit, the rules in
contracts.spec_rules): an instance across hosts is accepted only where Wharf can start it, its
cards add up, the cloud-only fields warn, and a spec without it hashes as before."""

from __future__ import annotations

import pytest

from contracts.sizing import estimate
from contracts.spec import SpecError, parse_spec
from contracts.spec_cloud import cloud_only_warnings


def llm_spec(engine: str = "vllm", gpu: int = 8, unit: dict | None = None, **llm) -> dict:
    data: dict = {"name": "big", "llm": {"engine": engine, "model": "tiny-llama", **llm}}
    if engine == "vllm-ascend":
        data["metadata"] = {"npu": gpu}
    elif engine != "vllm-cpu":
        data["metadata"] = {"gpu": gpu}
    if unit is not None:
        data["unit"] = unit
    return data


def pd_spec(prefill_tp: int, decode_tp: int, size: int, pp: int = 1, **pd) -> dict:
    roles = {"prefill": {"gpu": 4, "tensor_parallel_size": prefill_tp},
             "decode": {"gpu": 4, "tensor_parallel_size": decode_tp}}  # fmt: skip
    llm = {"engine": "vllm", "model": "tiny-llama", "pipeline_parallel_size": pp,
           "pd": {**roles, **pd}}  # fmt: skip
    return {"name": "big", "llm": llm, "unit": {"size": size}}


ACCEPTED = [
    pytest.param(llm_spec(unit={"size": 2}, tensor_parallel_size=8, pipeline_parallel_size=2),
                 id="two-hosts-of-8-gpus-tp8-pp2"),
    pytest.param(llm_spec(unit={"size": 2}, tensor_parallel_size=16), id="tensor-across-hosts"),
    pytest.param(llm_spec("sglang", unit={"size": 4}, tensor_parallel_size=8,
                          pipeline_parallel_size=4), id="sglang-four-hosts"),
    pytest.param(llm_spec("vllm-ascend", unit={"size": 2}, tensor_parallel_size=16),
                 id="ascend-two-hosts"),
    pytest.param(llm_spec("vllm-cpu", unit={"size": 2}, pipeline_parallel_size=2),
                 id="cpu-proof-pp2-on-two-hosts"),
    pytest.param(llm_spec(gpu=4, tensor_parallel_size=2, pipeline_parallel_size=2),
                 id="pipeline-on-one-host"),
    pytest.param(llm_spec(gpu=1, unit={"size": 1, "enable_c4d": True}), id="unit-of-one"),
    pytest.param(pd_spec(4, 4, size=2, pp=2), id="prefill-and-decode-each-across-hosts"),
    pytest.param({"name": "big", "unit": {"size": 2}, "llm": {
        "engine": "vllm-ascend", "model": "tiny-llama", "pipeline_parallel_size": 2,
        "pd": {"prefill": {"npu": 4, "tensor_parallel_size": 4},
               "decode": {"npu": 4, "tensor_parallel_size": 4},
               "kv_connector": "MooncakeConnectorV1", "rank_table": True}}},
        id="ascend-rank-tables-across-hosts"),
]  # fmt: skip


@pytest.mark.parametrize("data", ACCEPTED)
def test_accepts_instances_wharf_can_start_across_hosts(data):
    parse_spec(data)


REFUSED = [
    pytest.param(
        llm_spec(unit={"size": 2}, tensor_parallel_size=8),
        "unit.size",
        "unit.size 2 machines x metadata.gpu 8 per machine is 16 cards, and tensor 8 x "
        "pipeline 1 parallelism uses 8: make them equal, e.g. tensor_parallel_size 8 and "
        "pipeline_parallel_size 2",
        id="cards-across-hosts-must-add-up",
    ),
    pytest.param(
        llm_spec("tgi", unit={"size": 2}, tensor_parallel_size=16),
        "unit.size",
        "engine tgi cannot start one instance across 2 hosts; use an llm engine of vllm, "
        "vllm-cpu, sglang, vllm-ascend, or unit.size 1",
        id="engine-that-cannot-span-hosts",
    ),
    pytest.param(
        {"name": "big", "containers": [{"image": "x:1", "command": "run"}], "unit": {"size": 2}},
        "unit.size",
        "a service without an llm section cannot start one instance across 2 hosts; use an "
        "llm engine of vllm, vllm-cpu, sglang, vllm-ascend, or unit.size 1",
        id="no-llm-section",
    ),  # fmt: skip
    pytest.param(
        {
            **llm_spec(unit={"size": 2}, tensor_parallel_size=16),
            "containers": [{"command": "vllm serve m"}],
        },
        "unit.size",
        "a given command runs as it is, on one host: Wharf renders each host's command only "
        "for the engines it starts; remove containers[0].command or use unit.size 1",
        id="a-given-command",
    ),  # fmt: skip
    pytest.param(
        llm_spec("vllm-cpu", unit={"size": 2}, pipeline_parallel_size=3),
        "unit.size",
        "tensor 1 x pipeline 3 parallelism is 3 processes, which 2 hosts cannot share "
        "evenly; e.g. llm.pipeline_parallel_size 2 with tensor_parallel_size 1",
        id="cpu-processes-split-evenly",
    ),
    pytest.param(
        llm_spec(gpu=2, pipeline_parallel_size=4),
        "llm.pipeline_parallel_size",
        "tensor 1 x pipeline 4 parallelism needs as many cards; metadata.gpu is 2 (or span "
        "hosts with unit.size)",
        id="pipeline-on-one-host-needs-the-cards",
    ),
    pytest.param(
        llm_spec("tgi", gpu=2, pipeline_parallel_size=2),
        "llm.pipeline_parallel_size",
        "engine tgi has no pipeline parallelism Wharf renders; use one of vllm, vllm-cpu, "
        "sglang, vllm-ascend, or pipeline_parallel_size 1",
        id="pipeline-needs-an-engine-that-has-it",
    ),
    pytest.param(
        pd_spec(4, 2, size=2, pp=2),
        "llm.pd.decode.tensor_parallel_size",
        "unit.size 2 machines x llm.pd.decode.gpu 4 per machine is 8 cards, and tensor 2 x "
        "pipeline 2 parallelism uses 4: make them equal, e.g. tensor_parallel_size 4 and "
        "pipeline_parallel_size 2",
        id="each-role-adds-up",
    ),
    pytest.param(
        pd_spec(4, 4, size=2, pp=2, rank_table=True, kv_connector="LLMDataDistCMgrConnector"),
        "llm.pd.rank_table",
        "rank tables describe Ascend NPUs: they need engine vllm-ascend on NPU hosts",
        id="rank-tables-across-hosts-need-ascend",
    ),
    pytest.param(
        llm_spec("sglang", enable_expert_parallel=True),
        "llm.enable_expert_parallel",
        "engine sglang has no expert parallelism Wharf renders; use one of vllm, vllm-ascend, "
        "or give the engine's own flag in llm.options",
        id="expert-parallel-needs-an-engine-that-renders-it",
    ),
    pytest.param(
        llm_spec(unit={"size": 65}),
        "unit.size",
        "Input should be less than or equal to 64",
        id="at-most-64-machines",
    ),
]


@pytest.mark.parametrize(("data", "field", "message"), REFUSED)
def test_refuses_naming_the_field(data, field, message):
    with pytest.raises(SpecError) as caught:
        parse_spec(data)
    assert caught.value.errors[field] == [message]


def test_a_spec_without_unit_hashes_as_before():
    plain = {"name": "sd", "containers": [{"image": "sd:1", "command": "run", "port": 8000}]}
    assert parse_spec(plain).spec_hash() == "f1e33e2af8ee"
    assert parse_spec({**plain, "unit": {"size": 1}}).spec_hash() == "f1e33e2af8ee"


def test_unit_size_and_pipeline_shape_the_instance_but_cloud_fields_do_not():
    one = parse_spec(llm_spec(gpu=8, tensor_parallel_size=8)).spec_hash()
    pp = parse_spec(llm_spec(gpu=8, tensor_parallel_size=4, pipeline_parallel_size=2))
    two = llm_spec(unit={"size": 2}, tensor_parallel_size=8, pipeline_parallel_size=2)
    cloud = {**two, "unit": {"size": 2, "enable_c4d": True, "enable_rebuild": True}}
    assert parse_spec(llm_spec(gpu=8, tensor_parallel_size=8, pipeline_parallel_size=1)
                      ).spec_hash() == one  # fmt: skip
    assert len({one, pp.spec_hash(), parse_spec(two).spec_hash()}) == 3
    assert parse_spec(cloud).spec_hash() == parse_spec(two).spec_hash()


def test_cloud_only_unit_fields_warn_why():
    warnings = cloud_only_warnings(
        {"metadata": {}, "unit": {"size": 2, "enable_c4d": True, "enable_rebuild": False}}
    )
    assert [w["field"] for w in warnings] == ["unit.enable_c4d", "unit.enable_rebuild"]
    assert all(w["message"].startswith("no effect here: ") for w in warnings)


LLAMA = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
    "vocab_size": 32000, "max_position_embeddings": 4096, "torch_dtype": "float16",
}  # fmt: skip


def test_the_estimate_counts_every_members_cards():
    one_host = estimate(LLAMA, card_memory_gb=12, cards=2)
    two_hosts = estimate(LLAMA, card_memory_gb=12, cards=4, pipeline=2)
    assert not one_host.fits
    assert two_hosts.fits and two_hosts.weight_bytes_per_card * 2 <= one_host.weight_bytes_per_card


def test_the_estimate_splits_heads_over_a_stage_only():
    # 32 heads over 48 cards do not divide; over 3 pipeline stages of 16 cards they do.
    assert "attention heads" in estimate(LLAMA, card_memory_gb=80, cards=48).reason
    assert estimate(LLAMA, card_memory_gb=80, cards=48, pipeline=3).fits


def test_the_estimate_refuses_stages_that_do_not_divide_the_cards():
    with pytest.raises(ValueError, match="divide the cards"):
        estimate(LLAMA, card_memory_gb=80, cards=3, pipeline=2)


def test_every_parallelism_error_is_named_at_once():
    with pytest.raises(SpecError) as caught:
        parse_spec(llm_spec("tgi", gpu=2, pipeline_parallel_size=2, enable_expert_parallel=True))
    assert {"llm.pipeline_parallel_size", "llm.enable_expert_parallel"} <= set(caught.value.errors)


def test_expert_parallelism_on_shapes_the_instance_and_unset_or_off_hash_as_before():
    plain = parse_spec(llm_spec(gpu=8, tensor_parallel_size=8)).spec_hash()
    off = parse_spec(llm_spec(gpu=8, tensor_parallel_size=8, enable_expert_parallel=False))
    on = parse_spec(llm_spec(gpu=8, tensor_parallel_size=8, enable_expert_parallel=True))
    assert off.spec_hash() == plain != on.spec_hash()
