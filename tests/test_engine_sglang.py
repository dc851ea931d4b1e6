"""SGLang's adapter (contracts.engines.sglang) against launch_server's flags as SGLang 0.5's
server_args.py declares them: each spec field to its flag, and what SGLang cannot do refused."""

from __future__ import annotations

import pytest

from contracts.engines import Placement, render, validate
from contracts.spec import SpecError, parse_spec

GIB = 1024**3


def spec(cards: int = 1, **llm):
    return parse_spec({"name": "svc", "llm": {"engine": "sglang", "model": "m", **llm},
                       "metadata": {"gpu": cards}})  # fmt: skip


def args(cards: int = 1, **llm) -> list[str]:
    return render(spec(cards, **llm), Placement(devices=tuple(range(cards)))).args


def pairs(argv: list[str]) -> dict[str, str | None]:
    """Flag -> its value (None for a bare flag), from the first flag on."""
    found: dict[str, str | None] = {}
    flags = [i for i, a in enumerate(argv) if a.startswith("--")]
    for i in flags:
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        found[argv[i]] = None if nxt is None or (nxt.startswith("--")) else nxt
    return found


def test_the_command_is_sglangs_launch_server_with_metrics_on():
    argv = args()
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    assert pairs(argv) == {
        "--model-path": "/models/m", "--host": "0.0.0.0", "--port": "30000",
        "--served-model-name": "svc", "--enable-metrics": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("llm", "cards", "expected"),
    [
        ({"served_model_name": "qwen"}, 1, {"--served-model-name": "qwen"}),
        ({"tensor_parallel_size": 4}, 4, {"--tp-size": "4"}),
        ({"max_model_len": 8192}, 1, {"--context-length": "8192"}),
        ({"gpu_memory_utilization": 0.85}, 1, {"--mem-fraction-static": "0.85"}),
        ({"max_num_seqs": 64}, 1, {"--max-running-requests": "64"}),
        ({"max_num_batched_tokens": 16384}, 1, {"--max-prefill-tokens": "16384"}),
        ({"chunked_prefill_size": 4096}, 1, {"--chunked-prefill-size": "4096"}),
        ({"enable_chunked_prefill": False}, 1, {"--chunked-prefill-size": "-1"}),
        ({"quantization": "awq"}, 1, {"--quantization": "awq"}),
        ({"kv_cache_dtype": "fp8"}, 1, {"--kv-cache-dtype": "fp8_e4m3"}),
        ({"kv_cache_dtype": "fp8_e5m2"}, 1, {"--kv-cache-dtype": "fp8_e5m2"}),
        ({"dtype": "bfloat16"}, 1, {"--dtype": "bfloat16"}),
        ({"speculative": {"model": "draft", "num_speculative_tokens": 3}}, 1,
         {"--speculative-algorithm": "STANDALONE",
          "--speculative-draft-model-path": "/models/draft",
          "--speculative-num-steps": "3", "--speculative-eagle-topk": "1",
          "--speculative-num-draft-tokens": "4"}),
        ({"speculative": {"method": "eagle3", "model": "eagle", "num_speculative_tokens": 5}}, 1,
         {"--speculative-algorithm": "EAGLE3", "--speculative-draft-model-path": "/models/eagle",
          "--speculative-num-steps": "5", "--speculative-eagle-topk": "1",
          "--speculative-num-draft-tokens": "6"}),
        ({"speculative": {"method": "mtp", "num_speculative_tokens": 1}}, 1,
         {"--speculative-algorithm": "NEXTN", "--speculative-num-steps": "1",
          "--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "2"}),
        ({"speculative": {"method": "ngram", "num_speculative_tokens": 8}}, 1,
         {"--speculative-algorithm": "NGRAM", "--speculative-num-draft-tokens": "8"}),
        ({"options": {"--schedule-policy": "lpm", "--enable-mixed-chunk": True}}, 1,
         {"--schedule-policy": "lpm", "--enable-mixed-chunk": None}),
    ],
    ids=["served-name", "tp", "context", "memory-fraction", "running", "prefill-tokens",
         "chunk", "no-chunking", "quantization", "kv-fp8-alias", "kv-e5m2", "dtype",
         "draft-model", "eagle3", "mtp", "ngram", "options"],
)  # fmt: skip
def test_each_spec_field_renders_its_sglang_flag(llm, cards, expected):
    found = pairs(args(cards, **llm))
    assert {flag: found.get(flag, "<absent>") for flag in expected} == expected


@pytest.mark.parametrize(
    ("llm", "absent"),
    [
        ({}, "--tp-size"),
        ({}, "--speculative-algorithm"),
        ({"speculative": {"method": "ngram"}}, "--speculative-draft-model-path"),
        ({"speculative": {"method": "ngram"}}, "--speculative-num-steps"),
    ],
)  # fmt: skip
def test_flags_left_out_when_not_asked(llm, absent):
    assert absent not in args(**llm)


def test_the_plan_serves_health_and_metrics_on_its_port_with_its_cards():
    plan = render(spec(2, tensor_parallel_size=2), Placement(devices=(4, 5)))
    assert (plan.port, plan.health_path, plan.metrics_path) == (30000, "/health", "/metrics")
    assert plan.gpus == (4, 5)
    assert plan.image == "lmsysorg/sglang:v0.5.8"
    assert plan.shm_size_bytes == 64 * GIB
    assert render(spec(), Placement()).shm_size_bytes == GIB
    assert plan.env["HF_HUB_OFFLINE"] == "1"


def test_a_given_port_and_image_are_used():
    plan = render(parse_spec({
        "name": "svc", "llm": {"engine": "sglang", "model": "m"}, "metadata": {"gpu": 1},
        "containers": [{"image": "registry.local/sglang:0.5.8", "port": 8000}],
    }), Placement())  # fmt: skip
    assert plan.image == "registry.local/sglang:0.5.8"
    assert plan.port == 8000 and plan.args[plan.args.index("--port") + 1] == "8000"


@pytest.mark.parametrize(
    ("llm", "field"),
    [
        ({"quantization": "exl2"}, "llm.quantization"),
        ({"kv_cache_dtype": "int8"}, "llm.kv_cache_dtype"),
        ({"speculative": {"method": "medusa", "model": "heads"}}, "llm.speculative.method"),
        ({"enable_chunked_prefill": False, "chunked_prefill_size": 512},
         "llm.chunked_prefill_size"),
    ],
    ids=["quantization", "kv-dtype", "medusa", "chunk-size-when-off"],
)  # fmt: skip
def test_what_sglang_cannot_do_is_refused_naming_the_field(llm, field):
    assert field in validate(spec(**llm))


def test_valid_choices_pass_validation():
    assert validate(spec(quantization="fp8", kv_cache_dtype="bf16", dtype="float16")) == {}


def test_sglang_needs_a_gpu():
    with pytest.raises(SpecError) as caught:
        spec(cards=0)
    assert "metadata.gpu" in caught.value.errors


def test_sglang_serves_no_lora_adapters_here():
    lora = {"adapters": [{"name": "a", "model": "adapter"}]}
    with pytest.raises(SpecError) as caught:
        spec(lora=lora)
    assert "llm.lora" in caught.value.errors
