"""The tiny model's files are complete, consistent and deterministic (no vLLM needed here).

That real vLLM serves the model is checked by the end-to-end tests that start an engine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from tokenizers import Tokenizer

from controlplane.services import tiny_model
from controlplane.services.tiny_model import write_tiny_model

FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
}


def read_safetensors(path: Path) -> tuple[dict, bytes]:
    """The header and the data section, parsed by hand (numpy cannot hold bf16)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def bf16_values(data: bytes, entry: dict) -> np.ndarray:
    start, end = entry["data_offsets"]
    bits = np.frombuffer(data[start:end], dtype="<u2").astype(np.uint32) << 16
    return bits.view(np.float32).reshape(entry["shape"])


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


def test_writes_a_llama_model(model: Path):
    assert {p.name for p in model.iterdir()} == FILES
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert (config["hidden_size"], config["intermediate_size"]) == (256, 512)
    assert config["num_hidden_layers"] == 2
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
    assert config["tie_word_embeddings"] is False
    assert config["torch_dtype"] == config["dtype"] == "bfloat16"
    assert config["max_position_embeddings"] >= 512
    tok_config = json.loads((model / "tokenizer_config.json").read_text())
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    for part in ("bos_token", "messages", "add_generation_prompt"):
        assert part in tok_config["chat_template"]
    assert all(os.stat(p).st_mode & 0o044 == 0o044 for p in model.iterdir())  # readable by all


def test_weights_match_the_config(model: Path):
    config = json.loads((model / "config.json").read_text())
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    head_dim = h // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    expected = {
        "model.embed_tokens.weight": [v, h],
        "model.norm.weight": [h],
        "lm_head.weight": [v, h],
    }
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}."
        expected |= {
            p + "input_layernorm.weight": [h],
            p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [h, h],
            p + "self_attn.k_proj.weight": [kv, h],
            p + "self_attn.v_proj.weight": [kv, h],
            p + "self_attn.o_proj.weight": [h, h],
            p + "mlp.gate_proj.weight": [i, h],
            p + "mlp.up_proj.weight": [i, h],
            p + "mlp.down_proj.weight": [h, i],
        }

    header, data = read_safetensors(model / "model.safetensors")
    assert header.pop("__metadata__") == {"format": "pt"}
    assert {name: e["shape"] for name, e in header.items()} == expected
    assert {e["dtype"] for e in header.values()} == {"BF16"}
    # Tensors are packed back to back and fill the data section exactly.
    spans = sorted(e["data_offsets"] for e in header.values())
    assert spans[0][0] == 0 and spans[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    for e in header.values():
        assert e["data_offsets"][1] - e["data_offsets"][0] == 2 * int(np.prod(e["shape"]))

    assert np.all(bf16_values(data, header["model.norm.weight"]) == 1.0)
    embed = bf16_values(data, header["model.embed_tokens.weight"])
    assert abs(float(embed.std()) - 0.02) < 0.002 and abs(float(embed.mean())) < 0.001

    # The real safetensors parser accepts the hand-written file.
    with safe_open(str(model / "model.safetensors"), framework="numpy") as f:
        assert set(f.keys()) == set(expected)
        assert f.get_slice("lm_head.weight").get_dtype() == "BF16"


def test_bf16_rounds_to_nearest_even():
    values = np.array([1.0, -2.5, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 0.02], dtype=np.float32)
    bits = tiny_model._to_bf16(values)
    assert bits.tolist() == [0x3F80, 0xC020, 0x3F80, 0x3F82, 0x3CA4]


def test_tokenizer_round_trips_and_matches_the_config(model: Path):
    config = json.loads((model / "config.json").read_text())
    generation = json.loads((model / "generation_config.json").read_text())
    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    assert 300 <= tok.get_vocab_size() <= 512
    assert tok.get_vocab_size() == config["vocab_size"]

    bos, eos = tok.token_to_id("<|begin_of_text|>"), tok.token_to_id("<|end_of_text|>")
    assert (config["bos_token_id"], config["eos_token_id"]) == (bos, eos)
    assert (generation["bos_token_id"], generation["eos_token_id"]) == (bos, eos)

    for text in ["Hello, world!", "Wharf serves models.", "unseen: héllo wörld ✓ 日本 🚢\n\tx"]:
        enc = tok.encode(text)
        assert enc.ids[0] == bos  # completions get a BOS, like Llama's tokenizer
        assert all(0 <= t < config["vocab_size"] for t in enc.ids)
        assert tok.decode(enc.ids, skip_special_tokens=True) == text
    assert len(tok.encode("Hello, world!").ids) < len("Hello, world!")  # merges were learned


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path: Path):
    a = write_tiny_model(tmp_path / "a", seed=7)
    b = write_tiny_model(tmp_path / "b", seed=7)
    c = write_tiny_model(tmp_path / "c", seed=8)
    for name in FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (c / "tokenizer.json").read_bytes()


def test_replaces_an_existing_model_and_leaves_no_temporaries(tmp_path: Path):
    target = tmp_path / "tiny"
    write_tiny_model(target, seed=1)
    (target / "stale.txt").write_text("old")
    assert write_tiny_model(target, seed=2) == target
    assert {p.name for p in target.iterdir()} == FILES
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]


def test_a_failed_write_leaves_the_old_model_or_nothing(tmp_path: Path, monkeypatch):
    def broken(out: Path, seed: int) -> None:
        (out / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(tiny_model, "_write_files", broken)
    with pytest.raises(RuntimeError):
        write_tiny_model(tmp_path / "new")
    assert list(tmp_path.iterdir()) == []

    monkeypatch.undo()
    existing = write_tiny_model(tmp_path / "old")
    before = (existing / "model.safetensors").read_bytes()
    monkeypatch.setattr(tiny_model, "_write_files", broken)
    with pytest.raises(RuntimeError):
        write_tiny_model(existing)
    assert (existing / "model.safetensors").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["old"]
