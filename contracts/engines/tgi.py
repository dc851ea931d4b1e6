"""Hugging Face Text Generation Inference: `text-generation-launcher`.

Flags as the launcher reference documents them (huggingface.co/docs/text-generation-inference/
reference/launcher).
"""

from __future__ import annotations

from contracts.engines.common import (
    GIB,
    engine_image,
    engine_port,
    locate_models,
    option_args,
    shm_size,
    user_env,
)
from contracts.engines.plan import ContainerPlan, Placement
from contracts.spec import Llm, ServiceSpec

DEFAULT_PORT = 80  # the port TGI's image listens on (its PORT variable)
IMAGE = "ghcr.io/huggingface/text-generation-inference:3.3.5"
QUANTIZE = (
    "awq", "compressed-tensors", "eetq", "exl2", "gptq", "marlin",
    "bitsandbytes", "bitsandbytes-nf4", "bitsandbytes-fp4", "fp8",
)  # fmt: skip
KV_CACHE_DTYPES = {
    "fp8_e4m3fn": "fp8_e4m3fn",
    "fp8_e5m2": "fp8_e5m2",
    "fp8": "fp8_e4m3fn",
    "fp8_e4m3": "fp8_e4m3fn",
}
DTYPES = ("float16", "bfloat16")
# No model hub, and TGI's anonymous usage statistics stay off.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "USAGE_STATS": "off"}


def shard_args(tensor_parallel_size: int) -> list[str]:
    # Always a shard count: without one TGI shards over every GPU it can see.
    if tensor_parallel_size > 1:
        return ["--sharded", "true", "--num-shard", str(tensor_parallel_size)]
    return ["--num-shard", "1"]


def limit_args(llm: Llm) -> list[str]:
    args: list[str] = []
    if llm.max_model_len:
        # TGI's input limit defaults to the model's context, which must stay below the total.
        args += ["--max-total-tokens", str(llm.max_model_len)]
        args += ["--max-input-tokens", str(llm.max_model_len - 1)]
    if llm.max_num_seqs:
        # Past this TGI refuses requests rather than queueing them; the gateway queues.
        args += ["--max-concurrent-requests", str(llm.max_num_seqs)]
    if llm.max_num_batched_tokens:
        args += ["--max-batch-total-tokens", str(llm.max_num_batched_tokens)]
    if llm.chunked_prefill_size:
        # The tokens one prefill step takes; TGI splits longer prompts into such chunks.
        args += ["--max-batch-prefill-tokens", str(llm.chunked_prefill_size)]
    return args


def precision_args(llm: Llm) -> list[str]:
    args: list[str] = []
    if llm.quantization:
        args += ["--quantize", llm.quantization]
    if llm.dtype in DTYPES:
        args += ["--dtype", llm.dtype]
    if llm.kv_cache_dtype in KV_CACHE_DTYPES:
        args += ["--kv-cache-dtype", KV_CACHE_DTYPES[llm.kv_cache_dtype]]
    return args


def render(spec: ServiceSpec, placement: Placement) -> ContainerPlan:
    llm = spec.llm
    assert llm is not None and llm.model is not None
    port = engine_port(spec, placement, DEFAULT_PORT)
    models = locate_models(llm, placement)
    args = [
        "text-generation-launcher",
        "--model-id", models.path,
        "--hostname", placement.host,
        "--port", str(port),
        *shard_args(llm.tensor_parallel_size),
        *limit_args(llm),
        *precision_args(llm),
    ]  # fmt: skip
    if llm.gpu_memory_utilization:
        args += ["--cuda-memory-fraction", str(llm.gpu_memory_utilization)]
    if llm.speculative:
        # TGI speculates on its own: with the model's Medusa heads if it has them, else n-grams.
        args += ["--speculate", str(llm.speculative.num_speculative_tokens)]
    if models.adapters:
        # Local adapters as name=path; a chat or completion call picks one by its `model`.
        adapters = ",".join(f"{name}={path}" for name, path in models.adapters.items())
        args += ["--lora-adapters", adapters]
    return ContainerPlan(
        image=engine_image(spec, IMAGE),
        args=args + option_args(llm.options) + llm.extra_args,
        port=port,
        env={**OFFLINE_ENV, **user_env(spec)},
        mounts=models.mounts,
        health_path="/health",
        metrics_path="/metrics",
        shm_size_bytes=shm_size(spec.metadata.gpu, GIB),  # TGI's docs: 1g for NCCL
        gpus=placement.devices,
    )


def speculative_errors(llm: Llm) -> dict[str, list[str]]:
    speculative = llm.speculative
    if speculative is None or speculative.method == "ngram":
        return {}
    if speculative.method == "medusa":
        return {"llm.speculative.model": [
            "TGI reads Medusa heads from the served model, not a separate one: set llm.model "
            "to the Medusa checkpoint and speculative.method to ngram"
        ]}  # fmt: skip
    if speculative.model:
        return {"llm.speculative.model": [
            "TGI cannot run a separate draft model; drop llm.speculative.model and use method "
            "ngram, or serve with vllm"
        ]}  # fmt: skip
    return {"llm.speculative.method": [
        f"TGI has no {speculative.method} speculation; use method ngram"
    ]}  # fmt: skip


def validate(spec: ServiceSpec) -> dict[str, list[str]]:
    llm = spec.llm
    assert llm is not None
    errors = speculative_errors(llm)
    if llm.quantization and llm.quantization not in QUANTIZE:
        errors["llm.quantization"] = [
            f"TGI has no quantization {llm.quantization!r}; choose one of {', '.join(QUANTIZE)}"
        ]
    elif llm.quantization == "exl2" and llm.tensor_parallel_size > 1:
        errors["llm.quantization"] = ["exl2 models cannot be sharded; set tensor_parallel_size 1"]
    if llm.dtype == "float32":
        errors["llm.dtype"] = ["TGI runs float16 or bfloat16"]
    elif llm.dtype in DTYPES and llm.quantization:
        errors["llm.dtype"] = ["TGI takes a dtype or a quantization, not both; drop one"]
    if llm.kv_cache_dtype not in (None, "auto", *KV_CACHE_DTYPES):
        errors["llm.kv_cache_dtype"] = [
            f"TGI's KV-cache dtypes are fp8_e4m3fn and fp8_e5m2; not {llm.kv_cache_dtype!r}"
        ]
    if llm.enable_chunked_prefill is False:
        errors["llm.enable_chunked_prefill"] = [
            "TGI has no switch to turn chunked prefill off; drop the field"
        ]
    for knob in ("max_loras", "max_rank"):
        if llm.lora and getattr(llm.lora, knob):
            errors[f"llm.lora.{knob}"] = [
                "TGI sizes its adapters' memory itself and has no such setting; drop the field"
            ]
    return errors
