"""What sizing reads from a model's config.json, checked before any arithmetic is done with it.

A config.json comes from a user (POST /api/v1/estimate) or a model store, so every value
contracts.sizing reads is checked here for its type and range, and each problem is named by its
key path ("num_hidden_layers", "rope_scaling.factor", "mlp_only_layers[3]"). Values sizing does
not read are not looked at, and of a key's aliases only the one sizing reads (the first that is
present and not null) is checked. Pure: no I/O.

The bounds are far past every real model (each comment gives the largest we know of) and are
there to keep the arithmetic small: with them, an estimate is a few hundred integer operations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Bounds, inclusive.
MAX_LAYERS = 4096  # transformer layers; real: 126 (Llama 3.1 405B)
MAX_WIDTH = 1 << 19  # 524,288: hidden, intermediate and head widths, LoRA ranks; real: 73,728
MAX_HEADS = 1 << 14  # 16,384 attention or KV heads; real: 232 (Falcon-180B)
MAX_EXPERTS = 1 << 13  # 8,192 routed or shared experts; real: 512 (Qwen3-Next)
MAX_VOCAB = 1 << 23  # 8,388,608 tokens; real: 262,208 (Gemma 3)
MAX_POSITIONS = 1 << 30  # a trained context of 1,073,741,824 tokens; real: 10M (Llama 4 Scout)
MAX_ROPE_FACTOR = 1024  # YaRN's stretch of the context; real: 40 (DeepSeek-V3)
MAX_QUANT_BITS = 64  # bits per quantized weight; real: 8
MAX_NAME_CHARS = 200  # model_type, torch_dtype, quant_method, rope_type

# Aliases: families name the same number differently; sizing reads the first present.
HIDDEN = ("hidden_size", "d_model", "n_embd")
HEADS = ("num_attention_heads", "n_head")
LAYERS = ("num_hidden_layers", "num_layers", "n_layer")
VOCAB = ("padded_vocab_size", "vocab_size")
POSITIONS = ("max_position_embeddings", "seq_length", "model_max_length", "n_positions")
HEAD_DIM = ("head_dim", "kv_channels")
INTERMEDIATE = ("intermediate_size", "ffn_hidden_size")
KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_head_kv")
EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
MLA = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")  # needed with kv_lora_rank

# Families whose MLP is up/down with no gate; their config.json may omit intermediate_size.
UNGATED_MLP = {"falcon", "gpt2", "gpt_neox", "gpt_bigcode", "gptj", "opt", "bloom", "phi", "mpt"}

# Whole numbers sizing reads: (aliases, least, most). Required ones first. A least of 0 is
# for keys where sizing has always taken 0 to mean "none" (no experts, no dense prefix...).
_Range = tuple[tuple[str, ...], int, int]
_REQUIRED: tuple[_Range, ...] = (
    (HIDDEN, 1, MAX_WIDTH), (HEADS, 1, MAX_HEADS), (LAYERS, 1, MAX_LAYERS),
    (VOCAB, 1, MAX_VOCAB), (POSITIONS, 1, MAX_POSITIONS),
)  # fmt: skip
_OPTIONAL: tuple[_Range, ...] = (
    (HEAD_DIM, 1, MAX_WIDTH), (INTERMEDIATE, 1, MAX_WIDTH), (KV_HEADS, 1, MAX_HEADS),
    (("multi_query_group_num",), 1, MAX_HEADS), (EXPERTS, 0, MAX_EXPERTS),
    (("n_shared_experts",), 0, MAX_EXPERTS), (("moe_intermediate_size",), 0, MAX_WIDTH),
    (("shared_expert_intermediate_size",), 0, MAX_WIDTH),
    (("first_k_dense_replace",), 0, MAX_LAYERS), (("decoder_sparse_step",), 0, MAX_LAYERS),
    (("moe_layer_freq",), 0, MAX_LAYERS), (("kv_lora_rank",), 0, MAX_WIDTH),
    (("q_lora_rank",), 1, MAX_WIDTH), *(((key,), 1, MAX_WIDTH) for key in MLA),
)  # fmt: skip
_FLAGS = ("tie_word_embeddings", "attention_bias", "add_qkv_bias", "multi_query_attention",
          "multi_query")  # fmt: skip

Errors = dict[str, list[str]]


class ModelConfigError(ValueError):
    """config.json has values sizing cannot read; `errors` names each by its key path."""

    def __init__(self, errors: Errors):
        super().__init__(
            "config.json: " + "; ".join(f"{k} {', '.join(v)}" for k, v in errors.items())
        )
        self.errors = errors


def first_key(config: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    """The alias sizing reads: the first of `keys` present and not null."""
    return next((k for k in keys if config.get(k) is not None), None)


def first(config: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    key = first_key(config, keys)
    return None if key is None else config[key]


def problems(config: Mapping[str, Any]) -> Errors:
    """Every value sizing would read that is missing, of the wrong type or out of bounds,
    by key path; empty when sizing can read the whole config."""
    errors: Errors = {}
    for keys, *_ in _REQUIRED:
        if first_key(config, keys) is None:
            errors[keys[0]] = [_missing(keys)]
    for keys, least, most in (*_REQUIRED, *_OPTIONAL):
        if (key := first_key(config, keys)) is not None:
            _whole(config[key], key, least, most, errors)
    for key in _FLAGS:
        if config.get(key) is not None and not isinstance(config[key], bool):
            errors[key] = [f"must be true or false, not {describe(config[key])}"]
    _names(config, ("model_type", "torch_dtype"), "", errors)
    _layer_list(config.get("mlp_only_layers"), errors)
    _rope_scaling(config.get("rope_scaling"), errors)
    _quantization(config.get("quantization_config"), errors)
    _requirements(config, errors)
    return errors


def check(config: Mapping[str, Any]) -> None:
    """Raise ModelConfigError naming every problem `problems` finds."""
    if errors := problems(config):
        raise ModelConfigError(errors)


def describe(value: Any) -> str:
    """A JSON value in a few words for an error message: never its whole text."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None or isinstance(value, bool):
        return "null" if value is None else str(value).lower()
    if isinstance(value, str):
        text = value if len(value) <= 30 else value[:30] + "..."
        return f"the text {text!r}"
    if isinstance(value, int) and value.bit_length() > 63:
        return "a number past 2**63"  # and repr() refuses past 4,300 digits
    return repr(value)


def _missing(keys: tuple[str, ...]) -> str:
    aliases = f" (or {', '.join(repr(k) for k in keys[1:])})" if len(keys) > 1 else ""
    return f"is missing: sizing needs {keys[0]!r}{aliases} from config.json"


def _whole(value: Any, key: str, least: int, most: int, errors: Errors) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        errors[key] = [f"must be a whole number from {least} to {most:,}, not {describe(value)}"]


def _number(value: Any, key: str, most: float, errors: Errors) -> None:
    """A positive finite number (int or float) up to `most`; null allowed."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= most:
        errors[key] = [f"must be a number above 0 and at most {most:,}, not {describe(value)}"]


def _names(config: Mapping[str, Any], keys: tuple[str, ...], prefix: str, errors: Errors) -> None:
    for key in keys:
        value = config.get(key)
        if value is not None and (not isinstance(value, str) or len(value) > MAX_NAME_CHARS):
            errors[prefix + key] = [
                f"must be a name of at most {MAX_NAME_CHARS} characters, not {describe(value)}"
            ]


def _layer_list(layers: Any, errors: Errors) -> None:
    """mlp_only_layers: the indices of layers kept dense; only the first bad entry is named."""
    if layers is None:
        return
    if not isinstance(layers, list) or len(layers) > MAX_LAYERS:
        errors["mlp_only_layers"] = [f"must be a list of at most {MAX_LAYERS:,} layer numbers"]
        return
    for i, layer in enumerate(layers):
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < MAX_LAYERS:
            errors[f"mlp_only_layers[{i}]"] = [
                f"must be a layer number from 0 to {MAX_LAYERS - 1:,}, not {describe(layer)}"
            ]
            return


def _rope_scaling(rope: Any, errors: Errors) -> None:
    if rope is None:
        return
    if not isinstance(rope, dict):
        errors["rope_scaling"] = [f"must be an object or null, not {describe(rope)}"]
        return
    _names(rope, ("rope_type", "type"), "rope_scaling.", errors)
    if (rope.get("rope_type") or rope.get("type")) != "yarn":
        return  # only YaRN's numbers are read: they stretch the trained context
    _number(rope.get("factor"), "rope_scaling.factor", MAX_ROPE_FACTOR, errors)
    if (original := rope.get("original_max_position_embeddings")) is not None:
        key = "rope_scaling.original_max_position_embeddings"
        _whole(original, key, 1, MAX_POSITIONS, errors)


def _quantization(quant: Any, errors: Errors) -> None:
    if quant is None:
        return
    if not isinstance(quant, dict):
        errors["quantization_config"] = [f"must be an object or null, not {describe(quant)}"]
        return
    _names(quant, ("quant_method",), "quantization_config.", errors)
    for key in ("bits", "w_bit"):  # a number: EXL2 writes fractional bits (4.65)
        _number(quant.get(key), f"quantization_config.{key}", MAX_QUANT_BITS, errors)


def _requirements(config: Mapping[str, Any], errors: Errors) -> None:
    """Keys that other keys make necessary, and heads that must fit the hidden width."""
    if config.get("kv_lora_rank") and "kv_lora_rank" not in errors:  # DeepSeek's MLA
        for key in MLA:
            if config.get(key) is None:
                errors[key] = [_missing((key,)) + " with kv_lora_rank"]
    if config.get("multi_query_attention") and config.get("multi_query_group_num") is None:
        errors["multi_query_group_num"] = [_missing(("multi_query_group_num",))]
    model_type = config.get("model_type")
    gated = not (isinstance(model_type, str) and model_type in UNGATED_MLP)
    if gated and first_key(config, INTERMEDIATE) is None:
        errors[INTERMEDIATE[0]] = [_missing(INTERMEDIATE)]
    heads, hidden = first_key(config, HEADS), first_key(config, HIDDEN)
    if heads is None or hidden is None or heads in errors or hidden in errors:
        return
    if first_key(config, HEAD_DIM) is None and config[heads] > config[hidden]:
        errors[heads] = [f"must be at most {hidden} ({config[hidden]}) unless head_dim is given"]
