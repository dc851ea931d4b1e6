"""POST /api/v1/estimate fuzzed: whatever JSON arrives, the answer is never a 5xx, and a 400
names the fields at fault.

Seeded (derandomize) and bounded, so a run is the same run every time and takes seconds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from hypothesis import event, given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from contracts import model_config as mc
from tests.fuzz_support import fuzz, json_values
from tests.test_estimate_api import LLAMA3_8B, URL
from tests.test_sizing import DEEPSEEK_V3, QWEN1_5_MOE_A2_7B

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.test_estimate_api")]

FUZZ = fuzz(500)

FIELDS = (
    "config", "model", "card_memory_gb", "gpu_memory_utilization", "dtype", "kv_cache_dtype",
    "cards", "max_model_len",
)  # fmt: skip
OPTIONS = FIELDS[2:]
# Every key sizing reads from config.json, so that the fuzzer hits them rather than junk.
CONFIG_KEYS = (
    "model_type", "hidden_size", "d_model", "n_embd", "num_attention_heads", "n_head",
    "head_dim", "kv_channels", "intermediate_size", "ffn_hidden_size", "num_hidden_layers",
    "num_layers", "n_layer", "padded_vocab_size", "vocab_size", "max_position_embeddings",
    "seq_length", "model_max_length", "n_positions", "num_key_value_heads", "num_kv_heads",
    "n_head_kv", "multi_query_attention", "multi_query_group_num", "multi_query",
    "rope_scaling", "tie_word_embeddings", "attention_bias", "add_qkv_bias", "kv_lora_rank",
    "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "num_local_experts",
    "num_experts", "n_routed_experts", "mlp_only_layers", "first_k_dense_replace",
    "decoder_sparse_step", "moe_layer_freq", "moe_intermediate_size",
    "shared_expert_intermediate_size", "n_shared_experts", "quantization_config", "torch_dtype",
)  # fmt: skip
BASES = (LLAMA3_8B, DEEPSEEK_V3, QWEN1_5_MOE_A2_7B)
GONE = object()

JSON = json_values(max_leaves=10)
# Numbers where they hurt: zero, negatives, the edges of int64 and float, past every bound.
NUMBERS = st.integers(-3, 5) | st.sampled_from(
    [10**9, 2**31, 2**63, 10**100, 10**400, -(10**9), 1e308, 5e-324, -0.0, 0.5, 1.5, 4096.0]
)
# Each bound of contracts/model_config.py and one past it: the largest arithmetic that is allowed.
BOUNDS = [mc.MAX_LAYERS, mc.MAX_WIDTH, mc.MAX_HEADS, mc.MAX_EXPERTS, mc.MAX_VOCAB, mc.MAX_POSITIONS]
EDGES = st.sampled_from(BOUNDS) | st.sampled_from([bound + 1 for bound in BOUNDS])
VALUES = NUMBERS | EDGES | JSON
ROPE = st.fixed_dictionaries(
    {"rope_type": st.sampled_from(["yarn", "linear"]) | JSON},
    optional={"factor": VALUES, "original_max_position_embeddings": VALUES, "type": VALUES},
)
QUANT = st.fixed_dictionaries(
    {}, optional={"quant_method": st.sampled_from(["awq", "gptq", "fp8"]) | JSON, "bits": VALUES}
)
# Model names that must be refused before they reach the file system.
NAMES = ["a\x00b", "../etc", "a/../../b", "/etc", "a\\b", "a/b/c", ".", "-x", "x" * 300, "a/"]


@pytest.fixture
def api() -> APIClient:
    client = APIClient()
    client.force_authenticate(get_user_model().objects.create_user("fuzz"))
    return client


@pytest.fixture
def empty_store(settings, tmp_path):
    settings.WHARF_MODEL_DIR = tmp_path
    return tmp_path


def names_a_field(key: str) -> bool:
    return key in FIELDS or key.startswith(("config.", "model."))


def assert_answered(response, *, fields: tuple[str, ...] = FIELDS) -> dict[str, Any]:
    """Never a 5xx; a 400 lists its errors by field, and every one of them is a real field."""
    assert response.status_code < 500, response.content[:500]
    event(f"HTTP {response.status_code}")
    body = response.json()
    if response.status_code == 400:
        assert body["errors"], body
        assert all(names_a_field(key) for key in body["errors"]), body["errors"]
        assert any(key.split(".")[0] in fields for key in body["errors"]), body["errors"]
    return body


@FUZZ
@given(body=JSON)
def test_any_json_body_is_a_4xx_or_an_estimate(api, body):
    assert_answered(api.post(URL, json.dumps(body), content_type="application/json"))


@FUZZ
@given(body=st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), VALUES, max_size=6))
def test_any_object_body_is_a_4xx_or_an_estimate(api, body):
    assert_answered(api.post(URL, body, format="json"))


@FUZZ
@given(
    base=st.sampled_from(BASES),
    changes=st.dictionaries(
        st.sampled_from(CONFIG_KEYS) | st.text(max_size=8),
        VALUES | ROPE | QUANT | st.just(GONE),
        min_size=1,
        max_size=4,
    ),
)
def test_any_config_value_is_refused_by_key_or_estimated(api, base, changes):
    config = {k: v for k, v in {**base, **changes}.items() if v is not GONE}
    response = api.post(URL, {"config": config, "card_memory_gb": 80}, format="json")
    assert_answered(response, fields=("config",))


@FUZZ
@given(field=st.sampled_from(OPTIONS), value=VALUES)
def test_any_option_value_is_refused_by_name_or_estimated(api, field, value):
    response = api.post(
        URL, {"config": LLAMA3_8B, "card_memory_gb": 80, field: value}, format="json"
    )
    body = assert_answered(response, fields=(field,))
    if response.status_code == 400:
        assert set(body["errors"]) == {field}


@FUZZ
@given(name=st.text(max_size=40) | st.sampled_from(NAMES) | VALUES)
def test_any_model_name_is_refused_or_missing(api, empty_store, name):
    response = api.post(URL, {"model": name, "card_memory_gb": 80}, format="json")
    assert response.status_code in (400, 404)
    assert_answered(response, fields=("model",))
