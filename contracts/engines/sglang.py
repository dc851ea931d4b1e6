"""SGLang's server: `python -m sglang.launch_server`, as EAS's LLM deployment offers it beside
vLLM and BladeLLM.

Flag names and choices as SGLang 0.5 declares them in python/sglang/srt/server_args.py (read at
sgl-project/sglang@001067ff, the 0.5 line EAS's `pai-eas/sglang:0.5.8` image ships):
`--model-path`, `--served-model-name` (one name), `--tp-size`, `--context-length`,
`--mem-fraction-static`, `--max-running-requests`, `--max-prefill-tokens`,
`--chunked-prefill-size` (-1 turns chunking off), `--quantization`, `--kv-cache-dtype`,
`--dtype`, `--speculative-algorithm` with `--speculative-draft-model-path`,
`--speculative-num-steps`, `--speculative-eagle-topk`, `--speculative-num-draft-tokens`, and
`--enable-metrics` (its Prometheus page on /metrics of the serving port, read by
contracts.engine_metrics).

SGLang takes its API key only as `--api-key`, a command-line argument every local user can
read (`ps`), so the instance's engine key stays with its front (gateway.front), as for TGI.
SGLang's Python OpenAI routes do not compare a request's `model` with the served name
(sgl-project/sglang#7035, #31404), so callers' service and served names both reach it.
"""

from __future__ import annotations

from contracts.engines.common import (
    GIB,
    OFFLINE_ENV,
    engine_image,
    engine_port,
    locate_models,
    option_args,
    shm_size,
    user_env,
)
from contracts.engines.gang import as_member, sglang_args
from contracts.engines.plan import ContainerPlan, Placement
from contracts.spec import Llm, ServiceSpec

DEFAULT_PORT = 30000  # launch_server's default --port
IMAGE = "lmsysorg/sglang:v0.5.8"
# server_args.py's QUANTIZATION_CHOICES, less the Apple-only (mlx_*) and experimental ones.
QUANTIZATIONS = frozenset(
    {
        "awq", "awq_marlin", "auto-round", "bitsandbytes", "compressed-tensors", "fp8", "gguf",
        "gptq", "gptq_marlin", "marlin", "modelopt", "modelopt_fp4", "modelopt_fp8",
        "moe_wna16", "mxfp4", "mxfp8", "quark", "w4afp8", "w8a8_fp8", "w8a8_int8",
    }
)  # fmt: skip
# --kv-cache-dtype choices; vLLM's spellings of the same types are taken too.
KV_CACHE_DTYPES = {
    "auto": "auto", "fp8_e5m2": "fp8_e5m2", "fp8_e4m3": "fp8_e4m3", "bf16": "bf16",
    "bfloat16": "bfloat16", "fp8": "fp8_e4m3",
}  # fmt: skip
# llm.speculative.method -> --speculative-algorithm. A separate draft model is STANDALONE;
# mtp reuses the model's own next-token layers (NEXTN); medusa SGLang does not have.
ALGORITHMS = {
    "draft_model": "STANDALONE", "eagle": "EAGLE", "eagle3": "EAGLE3", "ngram": "NGRAM",
    "mtp": "NEXTN",
}  # fmt: skip


def speculative_args(llm: Llm, draft: str | None) -> list[str]:
    """A chain of `num_speculative_tokens` drafted tokens (top-k 1), as vLLM's
    num_speculative_tokens means: SGLang verifies those and the token before them. ngram
    proposes its draft tokens from the prompt, with no draft steps."""
    speculative = llm.speculative
    if speculative is None:
        return []
    k = speculative.num_speculative_tokens
    args = ["--speculative-algorithm", ALGORITHMS[speculative.method]]
    if speculative.method == "ngram":
        return args + ["--speculative-num-draft-tokens", str(k)]
    if draft is not None:
        args += ["--speculative-draft-model-path", draft]
    return args + [
        "--speculative-num-steps", str(k),
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", str(k + 1),
    ]  # fmt: skip


def scheduling_args(llm: Llm) -> list[str]:
    args: list[str] = []
    if llm.max_model_len:
        args += ["--context-length", str(llm.max_model_len)]
    if llm.gpu_memory_utilization:
        # The share of each card's memory SGLang sizes its weights and KV pool against.
        args += ["--mem-fraction-static", str(llm.gpu_memory_utilization)]
    if llm.max_num_seqs:
        args += ["--max-running-requests", str(llm.max_num_seqs)]
    if llm.max_num_batched_tokens:
        # The tokens of one prefill batch: SGLang's budget of a scheduler step's prefill.
        args += ["--max-prefill-tokens", str(llm.max_num_batched_tokens)]
    if llm.enable_chunked_prefill is False:
        args += ["--chunked-prefill-size", "-1"]
    elif llm.chunked_prefill_size:
        args += ["--chunked-prefill-size", str(llm.chunked_prefill_size)]
    return args


def precision_args(llm: Llm) -> list[str]:
    args: list[str] = []
    if llm.quantization:
        args += ["--quantization", llm.quantization]
    if llm.kv_cache_dtype:
        args += ["--kv-cache-dtype", KV_CACHE_DTYPES.get(llm.kv_cache_dtype, llm.kv_cache_dtype)]
    if llm.dtype:
        args += ["--dtype", llm.dtype]
    return args


def render(spec: ServiceSpec, placement: Placement) -> ContainerPlan:
    llm = spec.llm
    assert llm is not None and llm.model is not None
    port = engine_port(spec, placement, DEFAULT_PORT)
    models = locate_models(llm, placement)
    args = [
        "python", "-m", "sglang.launch_server",
        "--model-path", models.path,
        "--host", placement.host,
        "--port", str(port),
        "--served-model-name", llm.served_model_name or spec.name,
        "--enable-metrics",
    ]  # fmt: skip
    if llm.tensor_parallel_size > 1:
        args += ["--tp-size", str(llm.tensor_parallel_size)]
    if llm.pipeline_parallel_size > 1:
        args += ["--pp-size", str(llm.pipeline_parallel_size)]
    args += sglang_args(placement.gang)
    args += scheduling_args(llm) + precision_args(llm) + speculative_args(llm, models.draft)
    plan = ContainerPlan(
        image=engine_image(spec, IMAGE),
        args=args + option_args(llm.options) + llm.extra_args,
        port=port,
        env={**OFFLINE_ENV, **user_env(spec)},
        mounts=models.mounts,
        health_path="/health",
        metrics_path="/metrics",
        # SGLang's Docker guide gives its containers a large /dev/shm for NCCL between cards.
        shm_size_bytes=shm_size(spec.metadata.gpu, GIB),
        gpus=placement.devices,
    )
    return as_member(plan, placement.gang)


def validate(spec: ServiceSpec) -> dict[str, list[str]]:
    llm = spec.llm
    assert llm is not None
    errors: dict[str, list[str]] = {}
    if llm.quantization and llm.quantization not in QUANTIZATIONS:
        errors["llm.quantization"] = [
            f"SGLang has no quantization {llm.quantization!r}; choose one of "
            f"{', '.join(sorted(QUANTIZATIONS))} (a newer one goes in llm.extra_args)"
        ]
    if llm.kv_cache_dtype and llm.kv_cache_dtype not in KV_CACHE_DTYPES:
        errors["llm.kv_cache_dtype"] = [
            f"SGLang has no KV-cache dtype {llm.kv_cache_dtype!r}; choose one of "
            f"{', '.join(sorted(KV_CACHE_DTYPES))}"
        ]
    if llm.speculative and llm.speculative.method not in ALGORITHMS:
        errors["llm.speculative.method"] = [
            f"SGLang has no {llm.speculative.method} speculation; use one of "
            f"{', '.join(ALGORITHMS)}"
        ]
    if llm.chunked_prefill_size and llm.enable_chunked_prefill is False:
        errors["llm.chunked_prefill_size"] = [
            "chunked prefill is off (llm.enable_chunked_prefill is false); drop the size or "
            "turn it on"
        ]
    return errors
