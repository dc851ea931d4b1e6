"""A tiny random-weight Llama model that real vLLM loads and serves.

No weights can be downloaded here, yet tests and the embedded default engine need a model
whose shapes, tokens and timings are real. Its text is gibberish.

Only numpy and tokenizers are used, so the control plane's venv needs neither torch nor
transformers. The weights are bfloat16 because vLLM on CPU runs every model in bf16 (it
downcasts a float32 config to bf16 and warns once per weight it has to cast). numpy has no
bfloat16 and safetensors.numpy cannot write one, so _save_bf16_safetensors writes the
(simple) safetensors format itself: an 8-byte little-endian header length, a JSON header,
then the raw little-endian tensor bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

HIDDEN_SIZE = 256
INTERMEDIATE_SIZE = 512
NUM_LAYERS = 2
NUM_HEADS = 4
NUM_KV_HEADS = 2
HEAD_DIM = HIDDEN_SIZE // NUM_HEADS
MAX_POSITIONS = 2048
VOCAB_TARGET = 384
INIT_STD = 0.02  # LlamaConfig.initializer_range

BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"
SPECIAL_TOKENS = [BOS, EOS, PAD]

# Chat turns end with EOS so a (random) model can stop a reply; BOS comes from the template
# because vLLM tokenizes chat prompts without adding special tokens.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)

# Training text for the BPE merges: a few lines are enough, since byte-level BPE can encode
# any string with its 256 base symbols.
_CORPUS = [
    "Wharf is a self-hosted control plane for serving large language models.",
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How are you today? I am fine, thank you.",
    "A model is deployed as an engine behind an OpenAI-compatible endpoint.",
    "user: What is the capital of France? assistant: The capital of France is Paris.",
    "Tokens per second, time to first token and queue length are measured for each request.",
    "def main():\n    print('hello')\n    return 0\n",
    '0 1 2 3 4 5 6 7 8 9 10 100 1000 {"key": "value", "list": [1, 2, 3]}',
]


def _train_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS, trainer=trainer)
    # Like Llama 3: BOS is prepended to plain (completion) prompts.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A {BOS} $B",
        special_tokens=[(BOS, tok.token_to_id(BOS))],
    )
    return tok


def _weights(vocab_size: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * INIT_STD).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    q_out, kv_out = NUM_HEADS * HEAD_DIM, NUM_KV_HEADS * HEAD_DIM
    tensors = {"model.embed_tokens.weight": normal(vocab_size, HIDDEN_SIZE)}
    for i in range(NUM_LAYERS):
        p = f"model.layers.{i}."
        tensors.update(
            {
                p + "input_layernorm.weight": ones(HIDDEN_SIZE),
                p + "self_attn.q_proj.weight": normal(q_out, HIDDEN_SIZE),
                p + "self_attn.k_proj.weight": normal(kv_out, HIDDEN_SIZE),
                p + "self_attn.v_proj.weight": normal(kv_out, HIDDEN_SIZE),
                p + "self_attn.o_proj.weight": normal(HIDDEN_SIZE, q_out),
                p + "post_attention_layernorm.weight": ones(HIDDEN_SIZE),
                p + "mlp.gate_proj.weight": normal(INTERMEDIATE_SIZE, HIDDEN_SIZE),
                p + "mlp.up_proj.weight": normal(INTERMEDIATE_SIZE, HIDDEN_SIZE),
                p + "mlp.down_proj.weight": normal(HIDDEN_SIZE, INTERMEDIATE_SIZE),
            }
        )
    tensors["model.norm.weight"] = ones(HIDDEN_SIZE)
    tensors["lm_head.weight"] = normal(vocab_size, HIDDEN_SIZE)
    return tensors


def _to_bf16(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (as uint16), rounding to nearest even like torch does."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits += 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).astype("<u2")


def _save_bf16_safetensors(tensors: dict[str, np.ndarray], path: Path) -> None:
    header: dict = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        data = _to_bf16(tensors[name]).tobytes()
        header[name] = {
            "dtype": "BF16",
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header so tensor data is 8-byte aligned
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for blob in blobs:
            f.write(blob)


def _config(vocab_size: int, bos_id: int, eos_id: int, pad_id: int) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "initializer_range": INIT_STD,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": vocab_size,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        # transformers 5 reads "dtype"; older readers (and people) read "torch_dtype".
        "dtype": "bfloat16",
        "torch_dtype": "bfloat16",
    }


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _write_files(out: Path, seed: int) -> None:
    tok = _train_tokenizer()
    vocab_size = tok.get_vocab_size()
    bos_id, eos_id, pad_id = range(len(SPECIAL_TOKENS))  # the trainer numbers them first
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [bos_id, eos_id, pad_id]

    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}

    tok.save(str(out / "tokenizer.json"))
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **special,
            "model_max_length": MAX_POSITIONS,
            "clean_up_tokenization_spaces": False,
            "chat_template": CHAT_TEMPLATE,
        },
    )
    _write_json(out / "special_tokens_map.json", special)
    _write_json(out / "config.json", _config(vocab_size, bos_id, eos_id, pad_id))
    _write_json(
        out / "generation_config.json",
        {"bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": pad_id},
    )
    _save_bf16_safetensors(_weights(vocab_size, seed), out / "model.safetensors")


# The tiny model's linear layers as PEFT names them: (in, out) features.
LORA_MODULES = {
    "self_attn.q_proj": (HIDDEN_SIZE, NUM_HEADS * HEAD_DIM),
    "self_attn.k_proj": (HIDDEN_SIZE, NUM_KV_HEADS * HEAD_DIM),
    "self_attn.v_proj": (HIDDEN_SIZE, NUM_KV_HEADS * HEAD_DIM),
    "self_attn.o_proj": (NUM_HEADS * HEAD_DIM, HIDDEN_SIZE),
    "mlp.gate_proj": (HIDDEN_SIZE, INTERMEDIATE_SIZE),
    "mlp.up_proj": (HIDDEN_SIZE, INTERMEDIATE_SIZE),
    "mlp.down_proj": (INTERMEDIATE_SIZE, HIDDEN_SIZE),
}
LORA_STD = 0.1  # A and B both random (B non-zero): the adapter's text differs from the base's


def _lora_files(out: Path, seed: int, rank: int) -> None:
    """A PEFT LoRA adapter of every linear layer: adapter_config.json and its weights."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in range(NUM_LAYERS):
        for module, (fan_in, fan_out) in LORA_MODULES.items():
            prefix = f"base_model.model.model.layers.{layer}.{module}"
            tensors[f"{prefix}.lora_A.weight"] = rng.normal(0, LORA_STD, (rank, fan_in))
            tensors[f"{prefix}.lora_B.weight"] = rng.normal(0, LORA_STD, (fan_out, rank))
    _save_bf16_safetensors(tensors, out / "adapter_model.safetensors")
    _write_json(out / "adapter_config.json", {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank,
        "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False,
        "target_modules": sorted(m.rsplit(".", 1)[-1] for m in LORA_MODULES),
        "modules_to_save": None, "use_rslora": False, "use_dora": False,
        "base_model_name_or_path": "tiny",
    })  # fmt: skip


def write_tiny_lora(target: Path, *, seed: int = 1, rank: int = 8) -> Path:
    """Write a random LoRA adapter of the tiny model into ``target``; return it. Different
    seeds give adapters whose texts differ from each other's and the base model's."""
    return _write_atomically(target, lambda out: _lora_files(out, seed, rank))


def write_tiny_model(target: Path, *, seed: int = 0) -> Path:
    """Write the tiny model into directory ``target`` (replacing what is there); return it.
    The same seed gives identical files."""
    return _write_atomically(target, lambda out: _write_files(out, seed))


def _write_atomically(target: Path, write: Callable[[Path], None]) -> Path:
    """`write` fills a sibling temporary directory, which is then renamed to ``target``, so a
    crash never leaves a half-written model there."""
    target = Path(target).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    old: Path | None = None
    try:
        write(tmp)
        # mkdtemp makes an owner-only directory (and a strict umask owner-only files), but an
        # engine container running as another user must read the model.
        os.chmod(tmp, 0o755)
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        if target.exists():
            # A directory cannot be renamed over a non-empty one: move the old one aside.
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.rename(target, old / "model")
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            if (old / "model").exists() and not target.exists():
                os.rename(old / "model", target)
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return target
