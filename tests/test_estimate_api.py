"""POST /api/v1/estimate against the configured database (for users and auth only).

The project's urls.py wires the view separately; this module wires it itself.
"""

from __future__ import annotations

import json
import time

import pytest
from django.contrib.auth import get_user_model
from django.urls import path
from rest_framework.test import APIClient

from controlplane.services.api.estimate import Estimate

urlpatterns = [path("api/v1/estimate", Estimate.as_view())]

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.test_estimate_api")]

URL = "/api/v1/estimate"
LLAMA3_8B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
}  # fmt: skip


@pytest.fixture
def api() -> APIClient:
    client = APIClient()
    client.force_authenticate(get_user_model().objects.create_user("alice"))
    return client


@pytest.fixture
def store(settings, tmp_path):
    """A model store holding one model, llama3-8b."""
    (tmp_path / "llama3-8b").mkdir()
    (tmp_path / "llama3-8b" / "config.json").write_text(json.dumps(LLAMA3_8B))
    settings.WHARF_MODEL_DIR = tmp_path
    return tmp_path


def post(api, body):
    return api.post(URL, body, format="json")


def test_requires_authentication():
    assert APIClient().post(URL, {}, format="json").status_code in (401, 403)


def test_estimates_from_a_config():
    client = APIClient()
    client.force_authenticate(get_user_model().objects.create_user("bob"))
    response = post(client, {"config": LLAMA3_8B, "card_memory_gb": 80})
    assert response.status_code == 200
    body = response.json()
    assert body["fits"] is True and body["cards"] == 1
    assert body["kv_bytes_per_token"] == 131072 and body["max_model_len"] == 8192
    assert body["utilization"] == 0.9 and "reason" in body


def test_passes_every_option_through(api):
    body = {
        "config": LLAMA3_8B, "card_memory_gb": 24, "gpu_memory_utilization": 0.95,
        "dtype": "int8", "kv_cache_dtype": "fp8", "cards": 2, "max_model_len": 4096,
    }  # fmt: skip
    result = post(api, body).json()
    assert (result["cards"], result["dtype"], result["kv_cache_dtype"]) == (2, "int8", "fp8")
    assert (result["utilization"], result["max_model_len"]) == (0.95, 4096)
    assert result["fits"] and result["concurrent_sequences"] >= 1


def test_lora_slots_come_out_of_the_kv_cache(api):
    plain = post(api, {"config": LLAMA3_8B, "card_memory_gb": 80}).json()
    body = {"config": LLAMA3_8B, "card_memory_gb": 80, "max_loras": 8, "max_lora_rank": 64}
    served = post(api, body).json()
    assert served["lora_bytes_per_card"] == 8 * 64 * 69_632 * 32 * 2
    assert served["kv_tokens"] < plain["kv_tokens"] and plain["lora_bytes_per_card"] == 0
    # One given: vLLM's default for the other (1 slot, rank 16).
    ranked = post(api, {"config": LLAMA3_8B, "card_memory_gb": 80, "max_lora_rank": 64}).json()
    assert ranked["lora_bytes_per_card"] == 64 * 69_632 * 32 * 2
    bad = post(api, {"config": LLAMA3_8B, "card_memory_gb": 80, "max_loras": 0,
                     "max_lora_rank": "16"}).json()  # fmt: skip
    assert set(bad["errors"]) == {"max_loras", "max_lora_rank"}


def test_estimates_a_model_in_the_store(api, store):
    response = post(api, {"model": "llama3-8b", "card_memory_gb": 24})
    assert response.status_code == 200
    assert response.json()["params"] == pytest.approx(8.03e9, rel=0.01)


def test_card_memory_is_required_and_positive(api):
    for body in ({"config": LLAMA3_8B}, {"config": LLAMA3_8B, "card_memory_gb": 0}):
        response = post(api, body)
        assert response.status_code == 400
        assert "card_memory_gb" in response.json()["errors"]


def test_every_bad_field_is_named_at_once(api):
    body = {
        "config": LLAMA3_8B, "card_memory_gb": "lots", "gpu_memory_utilization": 1.5,
        "cards": 0, "max_model_len": -1, "dtype": "int3",
    }  # fmt: skip
    errors = post(api, body).json()["errors"]
    expected = {"card_memory_gb", "gpu_memory_utilization", "cards", "max_model_len", "dtype"}
    assert set(errors) == expected


def test_model_name_may_not_climb_out_of_the_store(api, store):
    (store.parent / "secret").mkdir(exist_ok=True)
    (store.parent / "secret" / "config.json").write_text(json.dumps(LLAMA3_8B))
    for name in ("../secret", "llama3-8b/../../secret", "/etc"):
        response = post(api, {"model": name, "card_memory_gb": 80})
        assert response.status_code == 400, name
        assert "model" in response.json()["errors"]


def test_missing_model_is_404_naming_it(api, store):
    response = post(api, {"model": "qwen-404b", "card_memory_gb": 80})
    assert response.status_code == 404
    body = response.json()
    assert "qwen-404b" in body["detail"] and "model store" in body["detail"]
    assert "model" in body["errors"]


def test_needs_exactly_one_of_config_and_model(api):
    for body in ({"card_memory_gb": 80}, {"config": LLAMA3_8B, "model": "x", "card_memory_gb": 80}):
        response = post(api, body)
        assert response.status_code == 400 and "config" in response.json()["errors"]


def test_config_missing_a_key_names_it(api):
    config = {k: v for k, v in LLAMA3_8B.items() if k != "num_hidden_layers"}
    response = post(api, {"config": config, "card_memory_gb": 80})
    assert response.status_code == 400
    assert "is missing" in response.json()["errors"]["config.num_hidden_layers"][0]


@pytest.mark.timeout(10)
def test_absurd_layer_count_is_refused_at_once(api):
    started = time.perf_counter()
    response = post(
        api, {"config": {**LLAMA3_8B, "num_hidden_layers": 10**9}, "card_memory_gb": 80}
    )
    assert time.perf_counter() - started < 1
    assert response.status_code == 400
    assert "from 1 to 4,096" in response.json()["errors"]["config.num_hidden_layers"][0]


def test_every_bad_config_value_is_named_with_the_options(api):
    config = {**LLAMA3_8B, "rope_scaling": [1], "num_attention_heads": 0, "vocab_size": "big"}
    errors = post(api, {"config": config, "card_memory_gb": -1}).json()["errors"]
    assert set(errors) == {
        "card_memory_gb", "config.rope_scaling", "config.num_attention_heads", "config.vocab_size",
    }  # fmt: skip


def test_bad_config_in_the_store_is_named_under_model(api, store):
    (store / "broken").mkdir()
    (store / "broken" / "config.json").write_text(json.dumps({**LLAMA3_8B, "head_dim": "128"}))
    response = post(api, {"model": "broken", "card_memory_gb": 80})
    assert response.status_code == 400
    assert "model.head_dim" in response.json()["errors"]


@pytest.mark.parametrize(
    "name",
    [
        "a\x00b",
        "x" * 300,
        "llama3-8b\n",
        "org/model/extra",
        "-rf",
        ".hidden",
        "a/./b",
        " ",
        "llama3-8b/",
    ],
)
def test_unsafe_model_name_is_refused(api, store, name):
    response = post(api, {"model": name, "card_memory_gb": 80})
    assert response.status_code == 400
    assert "model" in response.json()["errors"]


def test_deeply_nested_store_config_is_refused(api, store):
    (store / "deep").mkdir()
    (store / "deep" / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    response = post(api, {"model": "deep", "card_memory_gb": 80})
    assert response.status_code == 400 and "model" in response.json()["errors"]


@pytest.mark.parametrize("depth", [100, 100_000])
def test_deeply_nested_body_is_refused(api, depth):
    body = '{"card_memory_gb": 80, "config": ' + '{"a": ' * depth + "1" + "}" * (depth + 1)
    response = api.post(URL, body, content_type="application/json")
    assert response.status_code == 400 and "nested" in response.json()["detail"]


def test_body_over_a_mebibyte_is_refused(api):
    body = json.dumps({"config": {**LLAMA3_8B, "padding": "x" * 2**21}, "card_memory_gb": 80})
    assert api.post(URL, body, content_type="application/json").status_code == 413


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("card_memory_gb", "1e400"),  # JSON's overflow: Python reads it as infinity
        ("card_memory_gb", "1e300"),
        ("card_memory_gb", "1" + "0" * 400),  # an int float() cannot hold
        ("gpu_memory_utilization", "1" + "0" * 400),
        ("max_model_len", str(10**30)),
        ("cards", str(2**63)),
        ("gpu_memory_utilization", "-1e400"),
    ],
)
def test_numbers_past_their_bounds_are_refused(api, field, value):
    body = f'{{"config": {json.dumps(LLAMA3_8B)}, "card_memory_gb": 80, "{field}": {value}}}'
    response = api.post(URL, body, content_type="application/json")
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {field}
