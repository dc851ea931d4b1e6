"""Facts derived from a parsed spec (contracts.spec_facts), for the specs in deploy_specs/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.spec import parse_spec
from contracts.spec_facts import card_need, model_name, replicas

SPECS = Path(__file__).resolve().parents[1] / "deploy_specs"


def spec(file: str):
    return parse_spec(json.loads((SPECS / file).read_text()))


@pytest.mark.parametrize(
    ("file", "wanted", "needs", "model"),
    [
        ("demo-tiny-vllm.json", {"": 1}, {"": ("gpu", 0)}, "tiny"),
        ("custom-container.json", {"": 1}, {"": ("gpu", 0)}, "custom_echo"),
        ("vllm-gpu-tp2.json", {"": 1}, {"": ("gpu", 2)}, "qwen2-7b-instruct"),
        ("vllm-ascend-2npu.json", {"": 1}, {"": ("npu", 2)}, "qwen2-7b-instruct"),
        ("pd-vllm-gpu-nixl.json", {"prefill": 2, "decode": 1},
         {"prefill": ("gpu", 1), "decode": ("gpu", 2)}, "qwen2-7b-instruct"),
        ("pd-vllm-ascend-ranktable.json", {"prefill": 1, "decode": 1},
         {"prefill": ("npu", 2), "decode": ("npu", 2)}, "qwen2-7b-instruct"),
    ],
)  # fmt: skip
def test_replicas_cards_and_model_name(file, wanted, needs, model):
    parsed = spec(file)
    assert replicas(parsed) == wanted
    assert {role: card_need(parsed, role) for role in wanted} == needs
    assert model_name(parsed) == model


def test_npus_alone_outside_ascend_are_npus():
    parsed = parse_spec({"name": "s", "containers": [{"image": "i", "command": "c", "port": 8000}],
                         "metadata": {"npu": 1}})  # fmt: skip
    assert card_need(parsed) == ("npu", 1)
