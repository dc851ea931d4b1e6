"""Will it fit: parameter counts, KV cache sizes and card counts from config.json (pure)."""

from __future__ import annotations

import timeit

import pytest

from benchmarks.sizing_configs import CONFIGS, PUBLISHED_PARAMS_B
from contracts.model_config import MAX_EXPERTS, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH
from contracts.sizing import (
    GIB,
    MAX_CARDS,
    RESERVE_BYTES_PER_CARD,
    Params,
    count_params,
    estimate,
    kv_bytes_per_token,
    read_shape,
    weights_in_bytes,
)

LLAMA2_7B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
    "vocab_size": 32000, "max_position_embeddings": 4096, "tie_word_embeddings": False,
    "torch_dtype": "float16",
}  # fmt: skip
LLAMA3_8B = {
    **LLAMA2_7B, "intermediate_size": 14336, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
}  # fmt: skip
LLAMA3_70B = {
    **LLAMA3_8B, "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
    "num_attention_heads": 64,
}  # fmt: skip
QWEN2_7B = {
    "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
    "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
    "vocab_size": 152064, "max_position_embeddings": 32768, "tie_word_embeddings": False,
}  # fmt: skip
QWEN2_0_5B = {
    **QWEN2_7B, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
    "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
    "tie_word_embeddings": True,
}  # fmt: skip
QWEN3_30B_A3B = {
    "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
    "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False,
}  # fmt: skip
QWEN1_5_MOE_A2_7B = {
    "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
    "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
    "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 1,
    "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
    "vocab_size": 151936, "max_position_embeddings": 8192, "tie_word_embeddings": False,
}  # fmt: skip
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "vocab_size": 129280, "max_position_embeddings": 163840, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}  # fmt: skip


def near(value: float, expected: float, tolerance: float = 0.01) -> bool:
    return abs(value / expected - 1) <= tolerance


def test_llama2_7b_has_6_74_billion_parameters():
    assert near(count_params(LLAMA2_7B).total, 6.74e9)


def test_qwen2_7b_counts_its_untied_head_and_qkv_bias():
    assert near(count_params(QWEN2_7B).total, 7.6e9)
    assert count_params(QWEN2_7B).total == 7_615_616_512  # the published checkpoint


@pytest.mark.parametrize(
    ("config", "billions"),
    [
        (QWEN3_30B_A3B, 30.5),  # 128 routed experts, no shared one
        (QWEN1_5_MOE_A2_7B, 14.3),  # 60 routed experts + one wide shared expert
        (CONFIGS["mixtral-8x7b"], 46.7),  # 8 experts at full intermediate_size
        (DEEPSEEK_V3, 671),  # MLA, 3 dense layers, 256 routed + 1 shared (no MTP layer)
    ],
)
def test_moe_counts_every_expert(config, billions):
    assert near(count_params(config).total, billions * 1e9)


def test_tied_embeddings_are_counted_once():
    untied = count_params({**QWEN2_0_5B, "tie_word_embeddings": False}).total
    assert untied - count_params(QWEN2_0_5B).total == 151936 * 896


def test_llama3_8b_kv_cache_per_token_uses_its_8_kv_heads():
    # 2 (K and V) x 32 layers x 8 KV heads x 128 head_dim x 2 bytes
    assert estimate(LLAMA3_8B, card_memory_gb=80).kv_bytes_per_token == 131072


def test_mla_caches_the_latent_and_rotary_key_only():
    # DeepSeek-V3: 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes, however
    # many heads; the full-head equivalent would be 2 x 61 x 128 x 192 x 2.
    assert estimate(DEEPSEEK_V3, card_memory_gb=141).kv_bytes_per_token == 61 * 576 * 2
    shape = read_shape(DEEPSEEK_V3)
    assert kv_bytes_per_token(shape, 2, tp=8) == 61 * 576 * 2  # every card holds it all


def test_kv_heads_split_across_cards_and_replicate_past_their_count():
    shape = read_shape(LLAMA3_70B)
    one_head = 2 * 80 * 1 * 128 * 2
    assert kv_bytes_per_token(shape, 2, tp=4) == 2 * one_head
    assert kv_bytes_per_token(shape, 2, tp=8) == kv_bytes_per_token(shape, 2, tp=16) == one_head


def test_min_cards_grow_with_the_model_and_shrink_with_the_card():
    small = estimate(LLAMA3_8B, card_memory_gb=80)
    large = estimate(LLAMA3_70B, card_memory_gb=80)
    assert (small.cards, small.fits) == (1, True)
    assert large.cards > small.cards and large.fits
    on_small_cards = estimate(LLAMA3_70B, card_memory_gb=24)
    assert on_small_cards.cards > large.cards and on_small_cards.fits


def test_min_cards_are_a_power_of_two_that_divides_the_heads():
    # Qwen2-0.5B has 14 heads: 4 cards cannot split them, even where memory would want 4.
    forced = estimate(QWEN2_0_5B, card_memory_gb=80, cards=4)
    assert not forced.fits and "14 attention heads" in forced.reason
    # On cards too small for 2, the search may not go on to 4 (or 8, 16...): none divide 14.
    tiny = estimate(QWEN2_0_5B, card_memory_gb=0.4, utilization=1.0, reserve_bytes_per_card=0)
    assert (tiny.cards, tiny.fits) == (2, False)
    roomy = estimate(QWEN2_0_5B, card_memory_gb=0.6, utilization=1.0, reserve_bytes_per_card=0)
    assert (roomy.cards, roomy.fits) == (2, True)


def test_max_model_len_is_capped_at_max_position_embeddings():
    est = estimate(LLAMA3_8B, card_memory_gb=80)
    assert est.kv_tokens > 8192
    assert est.max_model_len == est.model_max_len == 8192
    assert est.concurrent_sequences == est.kv_tokens // 8192


def test_asked_max_model_len_is_checked():
    fits = estimate(LLAMA2_7B, card_memory_gb=32, max_model_len=4096)
    assert fits.fits and fits.max_model_len == 4096 and fits.concurrent_sequences >= 1
    too_long = estimate(LLAMA2_7B, card_memory_gb=32, cards=1, max_model_len=65536)
    assert not too_long.fits and "fewer than 65536" in too_long.reason
    past_context = estimate(LLAMA2_7B, card_memory_gb=80, max_model_len=8192)
    assert not past_context.fits and "4096" in past_context.reason


def test_kv_capacity_is_what_the_card_leaves_after_weights_and_reserve():
    est = estimate(LLAMA2_7B, card_memory_gb=32, cards=1)
    left = int(32 * GIB * 0.9) - est.weight_bytes - RESERVE_BYTES_PER_CARD
    assert est.kv_cache_bytes_per_card == left
    assert est.kv_tokens == left // (524288 * 16) * 16  # whole 16-token blocks


def test_int8_weights_halve_bf16_weights():
    bf16 = estimate(LLAMA2_7B, dtype="bf16", card_memory_gb=80)
    int8 = estimate(LLAMA2_7B, dtype="int8", card_memory_gb=80)
    assert bf16.weight_bytes == 2 * bf16.params
    # The block linears halve exactly; embeddings and lm_head stay 16-bit (3.9% of Llama-2).
    assert 0.5 <= int8.weight_bytes / bf16.weight_bytes < 0.53
    assert weights_in_bytes(Params(linear=1000, other=0), 1) * 2 == weights_in_bytes(
        Params(linear=1000, other=0), 2
    )


def test_int4_adds_group_scales_and_fp32_doubles():
    params = count_params(LLAMA2_7B)
    int4 = estimate(LLAMA2_7B, dtype="awq", card_memory_gb=80).weight_bytes
    assert 0.5 * params.linear + 2 * params.other < int4 < 0.53 * params.linear + 2 * params.other
    fp32 = estimate(LLAMA2_7B, dtype="fp32", card_memory_gb=80)
    assert fp32.weight_bytes == 4 * fp32.params and fp32.kv_cache_dtype == "float32"


def test_auto_dtype_reads_the_checkpoints_quantization():
    est = estimate(DEEPSEEK_V3, card_memory_gb=141)
    assert est.dtype == "fp8" and est.cards == 8 and est.fits  # 8 x H200, as deployed


def test_int8_kv_cache_halves_kv_per_token_and_doubles_tokens():
    auto = estimate(LLAMA3_8B, card_memory_gb=24)
    int8 = estimate(LLAMA3_8B, card_memory_gb=24, kv_cache_dtype="int8")
    assert int8.kv_bytes_per_token * 2 == auto.kv_bytes_per_token
    assert int8.kv_tokens == pytest.approx(2 * auto.kv_tokens, abs=32)


def test_too_big_for_any_group_says_so():
    est = estimate(DEEPSEEK_V3, dtype="bf16", card_memory_gb=16)
    assert not est.fits and est.cards == MAX_CARDS and est.max_model_len == 0


@pytest.mark.parametrize("key", ["num_hidden_layers", "hidden_size", "vocab_size"])
def test_missing_key_is_named(key):
    config = {k: v for k, v in LLAMA2_7B.items() if k != key}
    with pytest.raises(ValueError, match=key):
        estimate(config, card_memory_gb=80)


def test_missing_mla_key_is_named():
    config = {k: v for k, v in DEEPSEEK_V3.items() if k != "qk_rope_head_dim"}
    with pytest.raises(ValueError, match="qk_rope_head_dim"):
        count_params(config)


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="int3"):
        estimate(LLAMA2_7B, dtype="int3", card_memory_gb=80)


@pytest.mark.parametrize("model", sorted(CONFIGS))
def test_benchmark_configs_match_published_sizes(model):
    """The configs the ModelArts comparison runs on count what their model cards publish."""
    assert near(count_params(CONFIGS[model]).total, PUBLISHED_PARAMS_B[model] * 1e9)


def sparse_layers_one_by_one(config: dict) -> int:
    """The sparse layers counted the slow, obvious way: a reference for the closed form."""
    dense_first, dense = config.get("first_k_dense_replace", 0), config.get("mlp_only_layers", [])
    if "decoder_sparse_step" in config:
        step, shift = max(1, config["decoder_sparse_step"]), 1
    else:
        step, shift = max(1, config.get("moe_layer_freq", 1)), 0
    return sum(
        layer >= dense_first and layer not in dense and (layer + shift) % step == 0
        for layer in range(config["num_hidden_layers"])
    )


@pytest.mark.parametrize(
    "layout",
    [
        {"decoder_sparse_step": 2},
        {"decoder_sparse_step": 3, "mlp_only_layers": [2, 5, 5, 7, 40]},
        {"decoder_sparse_step": 0, "mlp_only_layers": [0, 23]},
        {"first_k_dense_replace": 3, "moe_layer_freq": 2},
        {"first_k_dense_replace": 30},
        {"first_k_dense_replace": 1, "moe_layer_freq": 5, "mlp_only_layers": [5, 6]},
    ],
)
def test_sparse_layers_are_counted_without_walking_the_layers(layout):
    moe = {k: v for k, v in QWEN1_5_MOE_A2_7B.items() if k != "decoder_sparse_step"}
    all_dense = count_params({**moe, "num_experts": 0}).total
    sparse_minus_dense = (count_params(moe).total - all_dense) // moe["num_hidden_layers"]
    config = {**moe, **layout}
    expected = all_dense + sparse_layers_one_by_one(config) * sparse_minus_dense
    assert count_params(config).total == expected


def test_an_estimate_at_every_bound_takes_milliseconds():
    config = {
        **QWEN3_30B_A3B, "num_hidden_layers": MAX_LAYERS, "hidden_size": MAX_WIDTH,
        "intermediate_size": MAX_WIDTH, "moe_intermediate_size": MAX_WIDTH,
        "num_attention_heads": MAX_HEADS, "num_key_value_heads": MAX_HEADS,
        "num_experts": MAX_EXPERTS, "vocab_size": MAX_VOCAB,
        "mlp_only_layers": list(range(0, MAX_LAYERS, 2)),
    }  # fmt: skip
    fastest = min(timeit.repeat(lambda: estimate(config, card_memory_gb=80), number=1, repeat=3))
    assert fastest < 0.02, f"{fastest * 1000:.1f} ms"
    assert not estimate(config, card_memory_gb=80).fits
