"""Will it fit: the memory an LLM deployment needs, estimated from the model's config.json.

Pure functions, no I/O. The model is vLLM's memory budget on one tensor-parallel (TP) group:

    per card:  card memory x utilization  =  weights / TP  +  reserve  +  KV cache

where `reserve` covers what is neither weights nor KV cache (activations of the profiling
forward pass, the CUDA/CANN context, communication buffers, CUDA graphs). Everything is an
estimate: parameter counts are exact for the architectures handled below when the config
is complete, but the reserve is one tuned constant (see RESERVE_BYTES_PER_CARD), and real
engines round, pad and fragment memory in ways a config cannot show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contracts import model_config as mc

GIB = 1 << 30

# TP degrees tried when the caller lets us choose: powers of two, as vLLM's TP needs
# divisibility of heads that in practice only powers of two give.
MAX_CARDS = 64
# The largest card memory estimate() takes, in GB: 16 TiB, far past any card (288 GB today);
# the bound keeps a JSON number like 1e400 (read as infinity) out of the byte arithmetic.
MAX_CARD_MEMORY_GB = 16384

# What a replica must hold at least, when no max_model_len is asked for: one sequence of
# this many tokens (or the model's whole context if shorter). 4K is the shortest context
# worth serving a chat model with, and where ModelArts' own sizing ladder starts.
DEFAULT_MIN_CONTEXT = 4096

# vLLM hands out KV cache in blocks of 16 tokens; a partial block holds nothing usable.
KV_BLOCK_TOKENS = 16

# Per-card memory that is neither weights nor KV cache: activations of vLLM's profiling
# forward pass, the CUDA/CANN context, HCCL/NCCL buffers, CUDA graphs. One constant for
# every model and card, not a fraction: none of these grow with the card. Tuned against
# ModelArts' measured table (benchmarks/sizing_vs_modelarts.py --scan, benchmarks/README.md):
# minimum cards agree on all 76 rows for any reserve from 5.6 to 6.9 GiB, and 6 GiB is the
# round number inside that range. It errs safe on NVIDIA with current vLLM, whose chunked
# prefill keeps activations small (2-4 GiB is typical there); it does not model ModelArts'
# vLLM 0.6, whose activations grow with max_model_len, so long contexts come out longer
# than ModelArts measured.
RESERVE_BYTES_PER_CARD = 6 * GIB

# Group-wise int4 (AWQ/GPTQ, group 128) stores an fp16 scale and a 4-bit zero point per
# 128 weights: (16 + 4) / 128 bits per weight on top of the 4 bits.
INT4_SCALE_OVERHEAD = 2.5 / 128

# Bytes per parameter of the transformer blocks' linear layers, by the name a user gives.
# Quantization leaves embeddings, lm_head and norms in 16 bits (AWQ, GPTQ, SmoothQuant
# and the FP8 checkpoints all do), so these apply to the block linears only.
WEIGHT_DTYPES: dict[str, float] = {
    "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "half": 2,
    "fp32": 4, "float32": 4, "float": 4,
    "int8": 1, "w8a8": 1, "w8a16": 1, "fp8": 1, "smoothquant": 1,
    "int4": 0.5 + INT4_SCALE_OVERHEAD, "w4a16": 0.5 + INT4_SCALE_OVERHEAD,
    "awq": 0.5 + INT4_SCALE_OVERHEAD, "gptq": 0.5 + INT4_SCALE_OVERHEAD,
}  # fmt: skip

KV_DTYPES: dict[str, int] = {
    "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "half": 2,
    "fp32": 4, "float32": 4, "float": 4,
    "int8": 1, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}  # fmt: skip

# Families that tie lm_head to the embedding when config.json does not say.
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3_text"}
# Families with a bias on the q/k/v projections even without `attention_bias`.
_QKV_BIAS = {"qwen", "qwen2", "qwen2_moe", "qwen2_vl"}


@dataclass(frozen=True)
class Shape:
    """The numbers sizing needs, read once from config.json whatever a family calls them."""

    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    gated: bool
    qkv_bias: bool
    max_len: int
    mla_kv_width: int  # kv_lora_rank + qk_rope_head_dim for MLA; 0 for ordinary attention


@dataclass(frozen=True)
class Params:
    """Parameters by what quantization does to them."""

    linear: int  # the blocks' linear layers (and MoE experts): what quantization shrinks
    other: int  # embeddings, lm_head, norms, biases, routers: kept in 16 bits

    @property
    def total(self) -> int:
        return self.linear + self.other


@dataclass(frozen=True)
class Estimate:
    params: int
    weight_bytes: int
    kv_bytes_per_token: int  # the whole model (every layer and KV head), one token
    cards: int
    card_memory_bytes: int
    utilization: float
    max_model_len: int  # asked for, or the longest that fits (capped at model_max_len); 0: none
    fits: bool
    reason: str
    dtype: str
    kv_cache_dtype: str
    model_max_len: int  # the model's trained context (max_position_embeddings or the like)
    weight_bytes_per_card: int
    reserve_bytes_per_card: int
    kv_cache_bytes_per_card: int  # what is left for the KV cache on each card
    kv_tokens: int  # KV cache capacity in tokens per replica, not capped at model_max_len
    concurrent_sequences: int  # sequences of max_model_len tokens the KV cache holds at once
    lora_bytes_per_card: int = 0  # what LoRA adapter slots take (lora_bytes)


def _count(config: Mapping[str, Any], keys: tuple[str, ...], default: int = 0) -> int:
    """A whole number model_config.check has vetted; `default` where absent, null or 0."""
    return int(mc.first(config, keys) or default)


def _kv_heads(config: Mapping[str, Any], heads: int) -> int:
    if config.get("multi_query_attention"):  # ChatGLM: grouped-query under another name
        return _count(config, ("multi_query_group_num",))
    if mc.first(config, mc.KV_HEADS) is None and config.get("multi_query"):  # old Falcon
        return 1  # one shared KV head
    return _count(config, mc.KV_HEADS, heads)


def _max_len(config: Mapping[str, Any]) -> int:
    """The trained context; YaRN configs say how far their scaling stretches it."""
    base = _count(config, mc.POSITIONS)
    rope = config.get("rope_scaling") or {}
    kind = rope.get("rope_type") or rope.get("type")
    if kind == "yarn" and rope.get("factor"):
        original = rope.get("original_max_position_embeddings") or base
        return max(base, int(original * rope["factor"]))
    return base


def read_shape(config: Mapping[str, Any]) -> Shape:
    """The architecture in one vocabulary. Raises model_config.ModelConfigError (a
    ValueError) naming every key that is missing, mistyped or out of bounds."""
    mc.check(config)
    model_type = str(config.get("model_type") or "")
    hidden = _count(config, mc.HIDDEN)
    heads = _count(config, mc.HEADS)
    gated = model_type not in mc.UNGATED_MLP
    # GPT/Falcon default to 4 x hidden; model_config.check required it of gated families.
    intermediate = _count(config, mc.INTERMEDIATE, 4 * hidden)
    if model_type == "qwen":  # Qwen (v1) records the gate and up widths added together
        intermediate //= 2
    mla = _count(config, ("kv_lora_rank",))
    return Shape(
        model_type=model_type,
        hidden=hidden,
        layers=_count(config, mc.LAYERS),
        heads=heads,
        kv_heads=_kv_heads(config, heads),
        head_dim=_count(config, mc.HEAD_DIM, hidden // heads),
        intermediate=intermediate,
        vocab=_count(config, mc.VOCAB),
        tied=bool(config.get("tie_word_embeddings", model_type in _TIED_BY_DEFAULT)),
        gated=gated,
        qkv_bias=bool(
            config.get("attention_bias") or config.get("add_qkv_bias") or model_type in _QKV_BIAS
        ),
        max_len=_max_len(config),
        mla_kv_width=(mla + _count(config, ("qk_rope_head_dim",))) if mla else 0,
    )


def _attention_params(config: Mapping[str, Any], s: Shape) -> tuple[int, int]:
    """(linear, other) parameters of one layer's attention."""
    if s.mla_kv_width:  # DeepSeek-V2/V3 multi-head latent attention
        nope, rope, v_dim = (_count(config, (key,)) for key in mc.MLA)
        kv_rank = _count(config, ("kv_lora_rank",))
        q_rank = _count(config, ("q_lora_rank",))
        q_out = s.heads * (nope + rope)
        q = (s.hidden * q_rank + q_rank * q_out) if q_rank else s.hidden * q_out
        linear = q + s.hidden * s.mla_kv_width + kv_rank * s.heads * (nope + v_dim)
        linear += s.heads * v_dim * s.hidden
        return linear, kv_rank + q_rank  # the latent layernorms
    q_width = s.heads * s.head_dim
    kv_width = s.kv_heads * s.head_dim
    linear = s.hidden * (q_width + 2 * kv_width) + q_width * s.hidden
    other = (q_width + 2 * kv_width) if s.qkv_bias else 0
    if s.model_type.startswith("qwen3"):  # Qwen3 normalises q and k per head
        other += 2 * s.head_dim
    return linear, other


def _mlp_params(s: Shape, width: int) -> int:
    return (3 if s.gated else 2) * s.hidden * width


def _multiples(step: int, start: int, stop: int) -> int:
    """How many multiples of `step` lie in [start, stop)."""
    return max(0, (stop - 1) // step - (start - 1) // step)


def _sparse_layers(config: Mapping[str, Any], layers: int) -> int:
    """How many layers are sparse (MoE), counted without a loop over the layers: DeepSeek/GLM
    keep the first k dense, Qwen-MoE makes every n-th sparse (counting from one) and can list
    some dense, DeepSeek-V2 makes every n-th sparse (counting from zero)."""
    if _count(config, mc.EXPERTS) <= 1:
        return 0
    first_sparse = min(layers, _count(config, ("first_k_dense_replace",)))
    if config.get("decoder_sparse_step") is not None:
        step, shift = max(1, _count(config, ("decoder_sparse_step",))), 1
    else:
        step, shift = max(1, _count(config, ("moe_layer_freq",), 1)), 0

    def sparse(layer: int) -> bool:
        return first_sparse <= layer < layers and (layer + shift) % step == 0

    kept_dense = {layer for layer in config.get("mlp_only_layers") or [] if sparse(layer)}
    return _multiples(step, first_sparse + shift, layers + shift) - len(kept_dense)


def _moe_params(config: Mapping[str, Any], s: Shape) -> tuple[int, int]:
    """(linear, other) parameters of one sparse layer: routed + shared experts and router."""
    experts = _count(config, mc.EXPERTS)
    width = _count(config, ("moe_intermediate_size",), s.intermediate)
    linear = experts * _mlp_params(s, width)
    shared = _count(config, ("shared_expert_intermediate_size",))  # Qwen-MoE: one wide one
    if shared:
        linear += _mlp_params(s, shared)
    linear += _count(config, ("n_shared_experts",)) * _mlp_params(s, width)  # DeepSeek
    router = s.hidden * experts + (s.hidden if shared else 0)  # Qwen-MoE gates its shared one
    return linear, router


def count_params(config: Mapping[str, Any]) -> Params:
    """Parameters of the language model as vLLM loads it.

    Exact for Llama/Qwen/Mistral/Mixtral/Qwen-MoE/DeepSeek/ChatGLM-style configs up to
    norm biases; approximate in what it leaves out: vision towers and audio encoders of
    multimodal checkpoints, DeepSeek-V3's and GLM-4.5's multi-token-prediction layer (vLLM
    loads it only for speculative decoding), and positional tables of learned-position
    models (a few million parameters).
    """
    return _params(config, read_shape(config))


def _params(config: Mapping[str, Any], s: Shape) -> Params:
    attn_linear, attn_other = _attention_params(config, s)
    sparse = _sparse_layers(config, s.layers)
    moe_linear, moe_other = _moe_params(config, s) if sparse else (0, 0)
    dense = s.layers - sparse
    linear = s.layers * attn_linear + sparse * moe_linear + dense * _mlp_params(s, s.intermediate)
    other = s.layers * (attn_other + 2 * s.hidden) + sparse * moe_other  # two norms per layer
    embeddings = s.vocab * s.hidden * (1 if s.tied else 2)
    return Params(linear=linear, other=other + embeddings + s.hidden)  # + the final norm


def weight_dtype(dtype: str, config: Mapping[str, Any]) -> tuple[str, float]:
    """(name, bytes per linear parameter). `auto` reads the checkpoint's quantization."""
    name = dtype.lower()
    if name != "auto":
        if name not in WEIGHT_DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; use auto or one of {sorted(WEIGHT_DTYPES)}")
        return name, WEIGHT_DTYPES[name]
    quant = config.get("quantization_config") or {}
    method = str(quant.get("quant_method", "")).lower()
    bits = quant.get("bits") or quant.get("w_bit")
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin") and bits in (4, 8):
        return method, WEIGHT_DTYPES["int4"] if bits == 4 else 1.0
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8", 1.0
    # vLLM serves fp32 checkpoints in 16 bits; an unknown quantization is counted at 16
    # bits too, which over-estimates rather than promises a fit that is not there.
    return ("bfloat16" if config.get("torch_dtype", "bfloat16") == "bfloat16" else "float16"), 2.0


def weights_in_bytes(params: Params, linear_bytes: float) -> int:
    """Weight memory: only the block linears shrink with quantization, the rest stays in
    16 bits (32 when the whole model is served in fp32)."""
    return int(params.linear * linear_bytes) + params.other * (4 if linear_bytes == 4 else 2)


def kv_dtype_bytes(kv_cache_dtype: str, weight_name: str) -> tuple[str, int]:
    """(name, bytes per KV element). `auto` is the activation dtype: 16 bits unless fp32."""
    name = kv_cache_dtype.lower()
    if name == "auto":
        return ("float32", 4) if WEIGHT_DTYPES.get(weight_name) == 4 else ("auto", 2)
    if name not in KV_DTYPES:
        raise ValueError(
            f"unknown kv_cache_dtype {kv_cache_dtype!r}; use auto or one of {sorted(KV_DTYPES)}"
        )
    return name, KV_DTYPES[name]


def kv_bytes_per_token(shape: Shape, element_bytes: int, tp: int = 1) -> int:
    """KV cache for one token on one card of a TP group of `tp`.

    Ordinary attention: K and V for every layer and KV head, KV heads split across cards
    (replicated when there are fewer heads than cards, as vLLM does). MLA caches one shared
    latent plus the rotary key per layer, and every card keeps all of it.
    """
    if shape.mla_kv_width:
        return shape.layers * shape.mla_kv_width * element_bytes
    heads_per_card = max(1, shape.kv_heads // tp)
    return 2 * shape.layers * heads_per_card * shape.head_dim * element_bytes


def lora_bytes(shape: Shape, slots: int, rank: int, tp: int = 1, element_bytes: int = 2) -> int:
    """What vLLM sets aside on one card for `slots` LoRA adapters (max_loras) of rank up to
    `rank` (max_lora_rank): for every slot, an A (rank x in) and a B (out x rank) buffer of
    each block's linear layers (q/k/v, o, gate/up, down), split over the TP group."""
    if not slots:
        return 0
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    mlp_out = (2 if shape.gated else 1) * shape.intermediate
    widths = (shape.hidden + q + 2 * kv) + (q + shape.hidden)
    widths += (shape.hidden + mlp_out) + (shape.intermediate + shape.hidden)
    return -(-slots * rank * shape.layers * widths * element_bytes // tp)


def tp_problem(shape: Shape, tp: int) -> str | None:
    """Why a TP degree cannot serve the model, or None: vLLM splits heads evenly."""
    if shape.heads % tp:
        return f"{shape.heads} attention heads do not divide across {tp} cards"
    if not shape.mla_kv_width and shape.kv_heads % tp and tp % shape.kv_heads:
        return f"{shape.kv_heads} KV heads neither divide across nor replicate onto {tp} cards"
    return None


def kv_capacity(
    kv_cache_bytes_per_card: int, bytes_per_token_per_card: int, block: int = KV_BLOCK_TOKENS
) -> int:
    """Whole KV blocks that fit, in tokens."""
    if kv_cache_bytes_per_card <= 0:
        return 0
    return kv_cache_bytes_per_card // (bytes_per_token_per_card * block) * block


@dataclass(frozen=True)
class _Budget:
    weights: int
    kv_cache: int
    tokens: int


def _budget(
    weight_bytes: int, shape: Shape, kv_bytes: int, usable: int, tp: int, lora: tuple[int, int]
) -> _Budget:
    """One card's split of `usable` bytes (memory x utilization - reserve) at TP `tp`, with
    `lora` (slots, rank) adapters' buffers."""
    # Approximation: vLLM replicates a few small pieces (norms, MoE routers, MLA down-
    # projections, KV projections when heads are fewer than cards); they are < 1% here.
    weights = -(-weight_bytes // tp)
    kv_cache = usable - weights - lora_bytes(shape, *lora, tp)
    return _Budget(
        weights, kv_cache, kv_capacity(kv_cache, kv_bytes_per_token(shape, kv_bytes, tp))
    )


def _tp_candidates(limit: int = MAX_CARDS) -> list[int]:
    return [1 << i for i in range(limit.bit_length()) if 1 << i <= limit]


def _check_inputs(card_memory_gb: float, utilization: float, cards: int | None) -> None:
    if not 0 < card_memory_gb <= MAX_CARD_MEMORY_GB:
        raise ValueError(f"card_memory_gb must be > 0 and at most {MAX_CARD_MEMORY_GB}")
    if not 0 < utilization <= 1:
        raise ValueError("utilization must be in (0, 1]")
    if cards is not None and cards < 1:
        raise ValueError("cards must be at least 1")


def estimate(
    config: Mapping[str, Any],
    *,
    dtype: str = "auto",
    kv_cache_dtype: str = "auto",
    card_memory_gb: float,
    utilization: float = 0.9,
    cards: int | None = None,
    max_model_len: int | None = None,
    reserve_bytes_per_card: int = RESERVE_BYTES_PER_CARD,
    lora: tuple[int, int] = (0, 0),
    pipeline: int = 1,
) -> Estimate:
    """Will the model fit, on how many cards, with how long a context. With `pipeline`
    stages (an instance across hosts: unit.size x cards per machine), the cards hold the
    layers split into stages and each stage's heads split over cards / pipeline.

    card_memory_gb is the card's memory as vendors print it, taken as GiB (an "80 GB" H100
    and a "64 GB" Ascend 910B report about that many GiB). `cards=None` picks the fewest
    power-of-two cards (up to MAX_CARDS) that hold the weights and one sequence of
    `max_model_len` tokens (DEFAULT_MIN_CONTEXT when not given). reserve_bytes_per_card
    overrides the tuned reserve for engines whose overhead is known. `lora` is (max_loras,
    max_lora_rank) when adapters are served: their buffers come out of the KV cache. Raises
    ValueError for
    bad arguments, and its model_config.ModelConfigError for a config.json sizing cannot
    read, naming every bad key.
    """
    _check_inputs(card_memory_gb, utilization, cards)
    if pipeline < 1 or (pipeline > 1 and (cards is None or cards % pipeline)):
        raise ValueError("pipeline stages must be at least 1 and divide the cards given")
    shape = read_shape(config)
    params = _params(config, shape)
    dtype_name, linear_bytes = weight_dtype(dtype, config)
    kv_name, kv_bytes = kv_dtype_bytes(kv_cache_dtype, dtype_name)
    weight_bytes = weights_in_bytes(params, linear_bytes)
    card_bytes = int(card_memory_gb * GIB)
    needed = max_model_len or min(DEFAULT_MIN_CONTEXT, shape.max_len)
    usable = int(card_bytes * utilization) - reserve_bytes_per_card

    def budget(tp: int) -> _Budget:
        return _budget(weight_bytes, shape, kv_bytes, usable, tp, lora)

    if cards is None:
        degrees = [tp for tp in _tp_candidates() if tp_problem(shape, tp) is None]
        cards = next((tp for tp in degrees if budget(tp).tokens >= needed), degrees[-1])
    b = budget(cards)
    fits, reason = _verdict(shape, b, (cards, pipeline), card_memory_gb, needed, max_model_len)
    chosen = max_model_len or min(b.tokens, shape.max_len)
    return Estimate(
        params=params.total,
        weight_bytes=weight_bytes,
        kv_bytes_per_token=kv_bytes_per_token(shape, kv_bytes),
        cards=cards,
        card_memory_bytes=card_bytes,
        utilization=utilization,
        max_model_len=chosen if fits else (max_model_len or 0),
        fits=fits,
        reason=reason,
        dtype=dtype_name,
        kv_cache_dtype=kv_name,
        model_max_len=shape.max_len,
        weight_bytes_per_card=b.weights,
        reserve_bytes_per_card=reserve_bytes_per_card,
        kv_cache_bytes_per_card=max(0, b.kv_cache),
        kv_tokens=b.tokens,
        concurrent_sequences=b.tokens // chosen if fits and chosen else 0,
        lora_bytes_per_card=lora_bytes(shape, *lora, cards),
    )


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _verdict(
    shape: Shape,
    b: _Budget,
    split: tuple[int, int],
    card_gb: float,
    needed: int,
    asked: int | None,
) -> tuple[bool, str]:
    """(fits, a sentence saying why), checked in the order a user would fix things; `split`
    is (cards, pipeline stages)."""
    cards, pipeline = split
    where = f"{cards} x {card_gb:g} GB card{'s' if cards > 1 else ''}"
    if problem := tp_problem(shape, cards // pipeline):
        return False, f"{problem}; tensor parallelism needs an even split"
    if b.kv_cache <= 0:
        return False, (
            f"weights ({_gib(b.weights)} per card) and the reserve leave no KV cache on "
            f"{where}: short by {_gib(-b.kv_cache)}"
        )
    if b.tokens < needed:
        verb = "hold" if cards > 1 else "holds"
        return False, f"{where} {verb} a KV cache of {b.tokens} tokens, fewer than {needed}"
    if asked and asked > shape.max_len:
        return False, (
            f"max_model_len {asked} exceeds the model's context of {shape.max_len} tokens; "
            "vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
        )
    return True, (
        f"fits on {where}: {_gib(b.weights)} weights, {_gib(b.kv_cache)} KV cache "
        f"({b.tokens} tokens) per card"
    )
