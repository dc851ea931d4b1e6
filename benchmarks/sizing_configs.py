"""ModelArts' measured sizing table, and the config.json of every model in it.

MODELARTS is table 1 of the appendix "基于vLLM不同模型推理支持最小卡数和最大序列说明" in
Huawei Cloud's ModelArts guide for vLLM 0.6.0 on Ascend 910B (AscendCloud 6.3.909), as
found in /work/shared/seeds/004_*.txt: for 32 GB and 64 GB cards at
gpu-memory-utilization 0.9, the fewest cards a model deploys on and the longest
max-model-len (in K = 1024 tokens) that ran their static benchmark on that many cards,
found by stepping 4K, 8K, 16K, ... None is their "--" (does not deploy).

CONFIGS holds, per model, the keys of the published Hugging Face config.json that sizing
reads (repository named in each entry, the one ModelArts links to), written from the
published files rather than downloaded. Values marked `# unsure` are recalled with less
certainty; each is a context length or a tie flag, cross-checked against the model's
published parameter count (PUBLISHED_PARAMS_B) where it affects size.
"""

from __future__ import annotations

from typing import Any

# name: (32 GB min cards, 32 GB max seq K, 64 GB min cards, 64 GB max seq K)
MODELARTS: dict[str, tuple[int | None, int | None, int | None, int | None]] = {
    "llama-7b": (1, 16, 1, 32),
    "llama-13b": (2, 16, 1, 16),
    "llama-65b": (8, 16, 4, 16),
    "llama2-7b": (1, 16, 1, 32),
    "llama2-13b": (2, 16, 1, 16),
    "llama2-70b": (8, 32, 4, 64),
    "llama3-8b": (1, 32, 1, 128),
    "llama3-70b": (8, 32, 4, 64),
    "qwen-7b": (1, 8, 1, 32),
    "qwen-14b": (2, 16, 1, 16),
    "qwen-72b": (8, 8, 4, 16),
    "qwen1.5-0.5b": (1, 128, 1, 256),
    "qwen1.5-7b": (1, 8, 1, 32),
    "qwen1.5-1.8b": (1, 64, 1, 128),
    "qwen1.5-14b": (2, 16, 1, 16),
    "qwen1.5-32b": (4, 32, 2, 64),
    "qwen1.5-72b": (8, 8, 4, 16),
    "qwen1.5-110b": (None, None, 8, 128),
    "qwen2-0.5b": (1, 128, 1, 256),
    "qwen2-1.5b": (1, 64, 1, 128),
    "qwen2-7b": (1, 8, 1, 32),
    "qwen2-72b": (8, 32, 4, 64),
    "chatglm2-6b": (1, 64, 1, 128),
    "chatglm3-6b": (1, 64, 1, 128),
    "glm-4-9b": (1, 32, 1, 128),
    "baichuan2-7b": (1, 8, 1, 32),
    "baichuan2-13b": (2, 4, 1, 4),
    "yi-6b": (1, 64, 1, 128),
    "yi-9b": (1, 32, 1, 64),
    "yi-34b": (4, 32, 2, 64),
    "deepseek-llm-7b": (1, 16, 1, 32),
    "deepseek-coder-instruct-33b": (4, 32, 2, 64),
    "deepseek-llm-67b": (8, 32, 4, 64),
    "mistral-7b": (1, 32, 1, 128),
    "mixtral-8x7b": (4, 8, 2, 32),
    "gemma-2b": (1, 64, 1, 128),
    "gemma-7b": (1, 8, 1, 32),
    "falcon-11b": (1, 8, 1, 64),
}

# Parameter counts the model cards publish, in billions: a check on the configs below.
PUBLISHED_PARAMS_B: dict[str, float] = {
    "llama-7b": 6.74, "llama-13b": 13.02, "llama-65b": 65.29, "llama2-7b": 6.74,
    "llama2-13b": 13.02, "llama2-70b": 68.98, "llama3-8b": 8.03, "llama3-70b": 70.55,
    "qwen-7b": 7.72, "qwen-14b": 14.17, "qwen-72b": 72.29, "qwen1.5-0.5b": 0.62,
    "qwen1.5-7b": 7.72, "qwen1.5-1.8b": 1.84, "qwen1.5-14b": 14.17, "qwen1.5-32b": 32.51,
    "qwen1.5-72b": 72.29, "qwen1.5-110b": 111.21, "qwen2-0.5b": 0.494, "qwen2-1.5b": 1.544,
    "qwen2-7b": 7.62, "qwen2-72b": 72.71, "chatglm2-6b": 6.24, "chatglm3-6b": 6.24,
    "glm-4-9b": 9.40, "baichuan2-7b": 7.51, "baichuan2-13b": 13.90, "yi-6b": 6.06,
    "yi-9b": 8.83, "yi-34b": 34.39, "deepseek-llm-7b": 6.91,
    "deepseek-coder-instruct-33b": 33.34, "deepseek-llm-67b": 67.42, "mistral-7b": 7.24,
    "mixtral-8x7b": 46.70, "gemma-2b": 2.51, "gemma-7b": 8.54, "falcon-11b": 11.10,
}  # fmt: skip


def _llama(
    hidden: int,
    inter: int,
    layers: int,
    heads: int,
    kv: int,
    vocab: int,
    ctx: int,
    model_type: str = "llama",
    tied: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A Llama-family config.json (Llama, Qwen1.5/2, Yi, DeepSeek-LLM, Mistral, Gemma)."""
    return {
        "model_type": model_type, "hidden_size": hidden, "intermediate_size": inter,
        "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "vocab_size": vocab, "max_position_embeddings": ctx,
        "tie_word_embeddings": tied, "torch_dtype": "bfloat16", **extra,
    }  # fmt: skip


def _qwen1(
    hidden: int, inter: int, layers: int, heads: int, vocab: int, ctx: int, seq: int
) -> dict[str, Any]:
    """Qwen (v1, QWenLMHeadModel): intermediate_size is gate + up together."""
    return {
        "model_type": "qwen", "hidden_size": hidden, "intermediate_size": inter,
        "num_hidden_layers": layers, "num_attention_heads": heads, "kv_channels": 128,
        "vocab_size": vocab, "max_position_embeddings": ctx, "seq_length": seq,
        "torch_dtype": "bfloat16",
    }  # fmt: skip


def _chatglm(layers: int, vocab: int, seq: int) -> dict[str, Any]:
    """ChatGLM2/3 and GLM-4 (ChatGLMModel): MQA under its own names, gated ffn."""
    return {
        "model_type": "chatglm", "hidden_size": 4096, "ffn_hidden_size": 13696,
        "num_layers": layers, "num_attention_heads": 32, "multi_query_attention": True,
        "multi_query_group_num": 2, "kv_channels": 128, "padded_vocab_size": vocab,
        "seq_length": seq, "add_qkv_bias": True, "add_bias_linear": False,
        "torch_dtype": "bfloat16",
    }  # fmt: skip


CONFIGS: dict[str, dict[str, Any]] = {
    # huggyllama/llama-*: LLaMA 1, 2K context.
    "llama-7b": _llama(4096, 11008, 32, 32, 32, 32000, 2048),
    "llama-13b": _llama(5120, 13824, 40, 40, 40, 32000, 2048),
    "llama-65b": _llama(8192, 22016, 80, 64, 64, 32000, 2048),
    # meta-llama/Llama-2-*-chat-hf, Llama-2-70b-chat-hf (GQA, 8 KV heads).
    "llama2-7b": _llama(4096, 11008, 32, 32, 32, 32000, 4096),
    "llama2-13b": _llama(5120, 13824, 40, 40, 40, 32000, 4096),
    "llama2-70b": _llama(8192, 28672, 80, 64, 8, 32000, 4096),
    # meta-llama/Meta-Llama-3-*-Instruct.
    "llama3-8b": _llama(4096, 14336, 32, 32, 8, 128256, 8192),
    "llama3-70b": _llama(8192, 28672, 80, 64, 8, 128256, 8192),
    # Qwen/Qwen-*-Chat (v1).
    "qwen-7b": _qwen1(4096, 22016, 32, 32, 151936, 8192, 8192),
    "qwen-14b": _qwen1(5120, 27392, 40, 40, 152064, 8192, 2048),  # unsure: context keys
    "qwen-72b": _qwen1(8192, 49152, 80, 64, 152064, 32768, 32768),
    # Qwen/Qwen1.5-*-Chat (model_type qwen2, full MHA except 32B/110B).
    # unsure: untied, as the published 0.62B (tied would be 0.46B) says.
    "qwen1.5-0.5b": _llama(1024, 2816, 24, 16, 16, 151936, 32768, "qwen2"),
    "qwen1.5-7b": _llama(4096, 11008, 32, 32, 32, 151936, 32768, "qwen2"),
    "qwen1.5-1.8b": _llama(2048, 5504, 24, 16, 16, 151936, 32768, "qwen2"),
    "qwen1.5-14b": _llama(5120, 13696, 40, 40, 40, 152064, 32768, "qwen2"),
    "qwen1.5-32b": _llama(5120, 27392, 64, 40, 8, 152064, 32768, "qwen2"),
    "qwen1.5-72b": _llama(8192, 24576, 80, 64, 64, 152064, 32768, "qwen2"),
    "qwen1.5-110b": _llama(8192, 49152, 80, 64, 8, 152064, 32768, "qwen2"),
    # Qwen/Qwen2-*-Instruct.
    "qwen2-0.5b": _llama(896, 4864, 24, 14, 2, 151936, 32768, "qwen2", tied=True),
    "qwen2-1.5b": _llama(1536, 8960, 28, 12, 2, 151936, 32768, "qwen2", tied=True),
    "qwen2-7b": _llama(3584, 18944, 28, 28, 4, 152064, 32768, "qwen2"),
    "qwen2-72b": _llama(8192, 29568, 80, 64, 8, 152064, 32768, "qwen2"),
    # THUDM/chatglm2-6b, chatglm3-6b, glm-4-9b-chat.
    "chatglm2-6b": _chatglm(28, 65024, 32768),
    "chatglm3-6b": _chatglm(28, 65024, 8192),
    "glm-4-9b": _chatglm(40, 151552, 131072),
    # baichuan-inc/Baichuan2-*-Chat (13B uses ALiBi and states only model_max_length).
    "baichuan2-7b": _llama(4096, 11008, 32, 32, 32, 125696, 4096, "baichuan"),
    "baichuan2-13b": {
        "model_type": "baichuan",
        "hidden_size": 5120,
        "intermediate_size": 13696,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "vocab_size": 125696,
        "model_max_length": 4096,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },  # fmt: skip
    # 01-ai/Yi-6B-Chat, Yi-9B, Yi-34B-Chat.
    "yi-6b": _llama(4096, 11008, 32, 32, 4, 64000, 4096),
    "yi-9b": _llama(4096, 11008, 48, 32, 4, 64000, 4096),
    "yi-34b": _llama(7168, 20480, 60, 56, 8, 64000, 4096),
    # deepseek-ai/deepseek-llm-7b-chat, deepseek-coder-33b-instruct, deepseek-llm-67b-chat.
    "deepseek-llm-7b": _llama(4096, 11008, 30, 32, 32, 102400, 4096),
    "deepseek-coder-instruct-33b": _llama(
        7168, 19200, 62, 56, 8, 32256, 16384, rope_scaling={"type": "linear", "factor": 4.0}
    ),
    "deepseek-llm-67b": _llama(8192, 22016, 95, 64, 8, 102400, 4096),
    # mistralai/Mistral-7B-v0.1, Mixtral-8x7B-Instruct-v0.1.
    "mistral-7b": _llama(4096, 14336, 32, 32, 8, 32000, 32768, "mistral", sliding_window=4096),
    "mixtral-8x7b": _llama(
        4096,
        14336,
        32,
        32,
        8,
        32000,
        32768,
        "mixtral",
        num_local_experts=8,
        num_experts_per_tok=2,
    ),  # fmt: skip
    # google/gemma-2b, gemma-7b (head_dim 256, tied embeddings).
    "gemma-2b": _llama(2048, 16384, 18, 8, 1, 256000, 8192, "gemma", tied=True, head_dim=256),
    "gemma-7b": _llama(3072, 24576, 28, 16, 16, 256000, 8192, "gemma", tied=True, head_dim=256),
    # tiiuae/falcon-11B: plain GELU MLP (4 x hidden), 8 KV heads.
    "falcon-11b": {
        "model_type": "falcon",
        "hidden_size": 4096,
        "num_hidden_layers": 60,
        "num_attention_heads": 32,
        "num_kv_heads": 8,
        "new_decoder_architecture": True,
        "vocab_size": 65024,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": False,  # unsure: untied matches the published 11.1B
        "torch_dtype": "bfloat16",
    },  # fmt: skip
}
