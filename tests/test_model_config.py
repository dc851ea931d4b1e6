"""What sizing reads from config.json: every value type-checked and bounded, named by key (pure)."""

from __future__ import annotations

import pytest

from benchmarks.sizing_configs import CONFIGS
from contracts import model_config
from contracts.model_config import (
    MAX_EXPERTS,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_POSITIONS,
    MAX_VOCAB,
    MAX_WIDTH,
    describe,
    problems,
)
from tests.test_sizing import DEEPSEEK_V3, LLAMA3_8B, QWEN1_5_MOE_A2_7B, QWEN3_30B_A3B

CHATGLM3_6B = CONFIGS["chatglm3-6b"]
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
GONE = object()  # the key is left out of the config


def changed(base: dict, **values) -> dict:
    config = {**base, **values}
    return {k: v for k, v in config.items() if v is not GONE}


# (what is wrong, the config, the key path that must be named)
BAD = [
    ("absurd layer count", changed(LLAMA3_8B, num_hidden_layers=10**9), "num_hidden_layers"),
    ("one layer too many", changed(LLAMA3_8B, num_hidden_layers=MAX_LAYERS + 1),
     "num_hidden_layers"),
    ("layers as a string", changed(LLAMA3_8B, num_hidden_layers="32"), "num_hidden_layers"),
    ("layers as a float", changed(LLAMA3_8B, num_hidden_layers=32.0), "num_hidden_layers"),
    ("layers as a bool", changed(LLAMA3_8B, num_hidden_layers=True), "num_hidden_layers"),
    ("negative layers", changed(LLAMA3_8B, num_hidden_layers=-1), "num_hidden_layers"),
    ("zero layers", changed(LLAMA3_8B, num_hidden_layers=0), "num_hidden_layers"),
    ("layers as a list", changed(LLAMA3_8B, num_hidden_layers=[32]), "num_hidden_layers"),
    ("layers as an object", changed(LLAMA3_8B, num_hidden_layers={"n": 32}), "num_hidden_layers"),
    ("layers missing", changed(LLAMA3_8B, num_hidden_layers=GONE), "num_hidden_layers"),
    ("layers null", changed(LLAMA3_8B, num_hidden_layers=None), "num_hidden_layers"),
    ("bad alias", changed(LLAMA3_8B, num_hidden_layers=GONE, num_layers="x"), "num_layers"),
    ("huge hidden size", changed(LLAMA3_8B, hidden_size=MAX_WIDTH + 1), "hidden_size"),
    ("zero heads", changed(LLAMA3_8B, num_attention_heads=0), "num_attention_heads"),
    ("too many heads", changed(LLAMA3_8B, num_attention_heads=MAX_HEADS + 1),
     "num_attention_heads"),
    ("heads wider than hidden", changed(LLAMA3_8B, num_attention_heads=8192),
     "num_attention_heads"),
    ("kv heads as a string", changed(LLAMA3_8B, num_key_value_heads="8"), "num_key_value_heads"),
    ("zero kv heads", changed(LLAMA3_8B, num_key_value_heads=0), "num_key_value_heads"),
    ("huge vocab", changed(LLAMA3_8B, vocab_size=MAX_VOCAB + 1), "vocab_size"),
    ("huge context", changed(LLAMA3_8B, max_position_embeddings=MAX_POSITIONS + 1),
     "max_position_embeddings"),
    ("context as a float", changed(LLAMA3_8B, max_position_embeddings=8192.5),
     "max_position_embeddings"),
    ("zero head_dim", changed(LLAMA3_8B, head_dim=0), "head_dim"),
    ("negative intermediate", changed(LLAMA3_8B, intermediate_size=-5), "intermediate_size"),
    ("gated MLP without intermediate", changed(LLAMA3_8B, intermediate_size=GONE),
     "intermediate_size"),
    ("a million experts", changed(QWEN3_30B_A3B, num_experts=10**6), "num_experts"),
    ("one expert too many", changed(QWEN3_30B_A3B, num_experts=MAX_EXPERTS + 1), "num_experts"),
    ("expert width as text", changed(QWEN3_30B_A3B, moe_intermediate_size="big"),
     "moe_intermediate_size"),
    ("shared experts negative", changed(DEEPSEEK_V3, n_shared_experts=-1), "n_shared_experts"),
    ("dense layers as a list", changed(DEEPSEEK_V3, first_k_dense_replace=[3]),
     "first_k_dense_replace"),
    ("sparse step negative", changed(QWEN1_5_MOE_A2_7B, decoder_sparse_step=-1),
     "decoder_sparse_step"),
    ("sparse step as a float", changed(QWEN1_5_MOE_A2_7B, decoder_sparse_step=1.5),
     "decoder_sparse_step"),
    ("layer freq huge", changed(DEEPSEEK_V3, moe_layer_freq=10**12), "moe_layer_freq"),
    ("dense layers as text", changed(QWEN3_30B_A3B, mlp_only_layers="0,1"), "mlp_only_layers"),
    ("a dense layer as text", changed(QWEN3_30B_A3B, mlp_only_layers=[0, "1"]),
     "mlp_only_layers[1]"),
    ("a dense layer past the bound", changed(QWEN3_30B_A3B, mlp_only_layers=[10**9]),
     "mlp_only_layers[0]"),
    ("too long a dense-layer list", changed(QWEN3_30B_A3B, mlp_only_layers=[0] * (MAX_LAYERS + 1)),
     "mlp_only_layers"),
    ("MLA without its rotary width", changed(DEEPSEEK_V3, qk_rope_head_dim=GONE),
     "qk_rope_head_dim"),
    ("MLA rank as a float", changed(DEEPSEEK_V3, kv_lora_rank=512.0), "kv_lora_rank"),
    ("MLA q rank negative", changed(DEEPSEEK_V3, q_lora_rank=-1536), "q_lora_rank"),
    ("MLA value width zero", changed(DEEPSEEK_V3, v_head_dim=0), "v_head_dim"),
    ("ChatGLM without its group count", changed(CHATGLM3_6B, multi_query_group_num=GONE),
     "multi_query_group_num"),
    ("rope scaling as a list", changed(LLAMA3_8B, rope_scaling=[1]), "rope_scaling"),
    ("rope type as a number", changed(LLAMA3_8B, rope_scaling={"rope_type": 7}),
     "rope_scaling.rope_type"),
    ("yarn factor as text", changed(LLAMA3_8B, rope_scaling={**YARN, "factor": "4"}),
     "rope_scaling.factor"),
    ("yarn factor absurd", changed(LLAMA3_8B, rope_scaling={**YARN, "factor": 1e300}),
     "rope_scaling.factor"),
    ("yarn original negative",
     changed(LLAMA3_8B, rope_scaling={**YARN, "original_max_position_embeddings": -1}),
     "rope_scaling.original_max_position_embeddings"),
    ("quantization as text", changed(LLAMA3_8B, quantization_config="awq"), "quantization_config"),
    ("quant method as a list", changed(LLAMA3_8B, quantization_config={"quant_method": ["awq"]}),
     "quantization_config.quant_method"),
    ("quant bits as text",
     changed(LLAMA3_8B, quantization_config={"quant_method": "awq", "bits": "4"}),
     "quantization_config.bits"),
    ("quant bits negative",
     changed(LLAMA3_8B, quantization_config={"quant_method": "awq", "w_bit": -4}),
     "quantization_config.w_bit"),
    ("tie flag as text", changed(LLAMA3_8B, tie_word_embeddings="false"), "tie_word_embeddings"),
    ("bias flag as a number", changed(LLAMA3_8B, attention_bias=1), "attention_bias"),
    ("model_type as a number", changed(LLAMA3_8B, model_type=5), "model_type"),
    ("model_type a megabyte long", changed(LLAMA3_8B, model_type="x" * 10**6), "model_type"),
    ("torch_dtype as an object", changed(LLAMA3_8B, torch_dtype={}), "torch_dtype"),
]  # fmt: skip


@pytest.mark.parametrize(("config", "key"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_value_is_named_by_its_key(config, key):
    errors = problems(config)
    assert key in errors, errors
    assert all(isinstance(m, str) and len(m) < 300 for m in errors[key])


@pytest.mark.parametrize(("config", "key"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_sizing_refuses_what_validation_refuses(config, key):
    from contracts.sizing import estimate

    with pytest.raises(model_config.ModelConfigError) as refused:
        estimate(config, card_memory_gb=80)
    assert key in refused.value.errors and key in str(refused.value)


GOOD = {
    **CONFIGS,
    "llama3-8b": LLAMA3_8B,
    "deepseek-v3": DEEPSEEK_V3,
    "qwen3-30b-a3b": QWEN3_30B_A3B,
    "qwen1.5-moe": QWEN1_5_MOE_A2_7B,
    "nulls where sizing allows them": changed(
        LLAMA3_8B, head_dim=None, rope_scaling=None, quantization_config=None, q_lora_rank=None
    ),
    "falsy MoE keys of a dense config": changed(
        LLAMA3_8B,
        num_experts=0,
        moe_intermediate_size=0,
        shared_expert_intermediate_size=0,
        n_shared_experts=0,
        first_k_dense_replace=0,
        kv_lora_rank=0,
    ),  # fmt: skip
    "an unread junk key": changed(LLAMA3_8B, architectures=[{"deep": [None, 1e300]}]),
    "an unread later alias": changed(LLAMA3_8B, model_max_length=10**30),
    "longrope's factor lists": changed(
        LLAMA3_8B, rope_scaling={"type": "longrope", "long_factor": [1.0], "short_factor": [1]}
    ),
    "yarn": changed(LLAMA3_8B, rope_scaling=YARN),
    "exl2's fractional bits": changed(LLAMA3_8B, quantization_config={"bits": 4.65}),
    "every bound at its largest": changed(
        QWEN3_30B_A3B,
        num_hidden_layers=MAX_LAYERS,
        hidden_size=MAX_WIDTH,
        intermediate_size=MAX_WIDTH,
        moe_intermediate_size=MAX_WIDTH,
        num_attention_heads=MAX_HEADS,
        num_key_value_heads=MAX_HEADS,
        num_experts=MAX_EXPERTS,
        vocab_size=MAX_VOCAB,
        max_position_embeddings=MAX_POSITIONS,
        mlp_only_layers=list(range(MAX_LAYERS)),
    ),  # fmt: skip
}


@pytest.mark.parametrize("config", GOOD.values(), ids=GOOD.keys())
def test_real_and_boundary_configs_pass(config):
    assert problems(config) == {}


def test_every_problem_is_named_at_once():
    config = changed(LLAMA3_8B, hidden_size="4096", vocab_size=-1, rope_scaling=[])
    assert set(problems(config)) == {"hidden_size", "vocab_size", "rope_scaling"}


@pytest.mark.parametrize(
    ("value", "described"),
    [
        ({"a": [1]}, "an object"),
        ([[[]]], "a list"),
        (None, "null"),
        (True, "true"),
        ("x" * 1000, "the text 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...'"),
        (10**5000, "a number past 2**63"),
        (32.0, "32.0"),
    ],
    ids=["object", "list", "null", "bool", "long text", "huge int", "float"],
)
def test_values_are_described_briefly(value, described):
    assert describe(value) == described
