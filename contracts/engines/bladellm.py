"""PAI-EAS BladeLLM: `blade_llm_server`, Alibaba's engine for Qwen and Llama models.

Flags as PAI documents them ("服务部署参数配置说明", `blade_llm_server --help`); BladeLLM uses
underscores where vLLM uses dashes.
"""

from __future__ import annotations

from contracts.engines.common import (
    engine_image,
    engine_port,
    locate_models,
    option_args,
    shm_size,
    user_env,
)
from contracts.engines.plan import ContainerPlan, Placement
from contracts.engines.vllm import (
    chunked_prefill_errors,
)
from contracts.spec import Llm, ServiceSpec

# blade_llm_server's default port; EAS keeps 8080 for its gateway, which the spec refuses.
DEFAULT_PORT = 8081
# The image EAS documents (eas-registry-vpc.<region_id>.cr.aliyuncs.com/pai-eas/blade-llm:<v>),
# pinned to one region and the console's current version; a registry mirror outside Alibaba
# Cloud's VPC goes in containers[0].image.
IMAGE = "eas-registry-vpc.cn-hangzhou.cr.aliyuncs.com/pai-eas/blade-llm:0.9.0"
KV_CACHE_QUANT = (
    "int8", "int4", "int8_affine", "int4_affine", "fp8_e5m2", "fp8_e4m3",
    "mix_f852i4", "mix_f843i4", "mix_i8i4", "mix_i4i4",
)  # fmt: skip
KV_CACHE_ALIASES = {"fp8": "fp8_e4m3"}


def kv_cache_quant(kv_cache_dtype: str | None) -> str | None:
    if kv_cache_dtype in (None, "auto"):
        return None
    return KV_CACHE_ALIASES.get(kv_cache_dtype, kv_cache_dtype)


def batch_tokens(llm: Llm) -> int | None:
    # --ragged_flash_max_batch_tokens is the console's 分块预填充块大小 (chunked-prefill
    # block size, default 2048): the tokens of one forward step, so also the step budget.
    return llm.chunked_prefill_size or llm.max_num_batched_tokens


def render(spec: ServiceSpec, placement: Placement) -> ContainerPlan:
    llm = spec.llm
    assert llm is not None and llm.model is not None
    port = engine_port(spec, placement, DEFAULT_PORT)
    models = locate_models(llm, placement)
    args = [
        "blade_llm_server",
        "--host", placement.host,
        "--port", str(port),
        "--model", models.path,
        "--tensor_parallel_size", str(llm.tensor_parallel_size),
    ]  # fmt: skip
    if llm.gpu_memory_utilization:
        args += ["--max_gpu_memory_utilization", str(llm.gpu_memory_utilization)]
    if tokens := batch_tokens(llm):
        args += ["--ragged_flash_max_batch_tokens", str(tokens)]
    if llm.dtype and llm.dtype != "auto":
        args += ["--dtype", llm.dtype]
    if kv := kv_cache_quant(llm.kv_cache_dtype):
        args += ["--kv_cache_quant", kv]
    if llm.speculative and models.draft:
        # Speculative sampling ("sps"): the draft proposes gamma tokens a step.
        gamma = str(llm.speculative.num_speculative_tokens)
        args += ["--decode_algo", "sps", "--gamma", gamma, "--draft.model", models.draft]
    return ContainerPlan(
        image=engine_image(spec, IMAGE),
        args=args + option_args(llm.options) + llm.extra_args,
        port=port,
        env=user_env(spec),
        mounts=models.mounts,
        health_path="",  # BladeLLM documents no health endpoint: a TCP check
        metrics_path=None,
        # EAS: 64 GB of shared memory for multi-card instances, none otherwise.
        shm_size_bytes=shm_size(spec.metadata.gpu, None),
        gpus=placement.devices,
    )


def validate(spec: ServiceSpec) -> dict[str, list[str]]:
    llm = spec.llm
    assert llm is not None
    errors = chunked_prefill_errors(llm)
    if llm.enable_chunked_prefill is False:
        errors["llm.enable_chunked_prefill"] = [
            "BladeLLM always prefills in chunks; size them with llm.chunked_prefill_size"
        ]
    if llm.quantization:
        errors["llm.quantization"] = [
            "BladeLLM reads a quantized model's scheme from its config; point llm.model at the "
            "quantized weights and drop llm.quantization"
        ]
    for field in ("max_model_len", "max_num_seqs"):
        if getattr(llm, field):
            errors[f"llm.{field}"] = [
                "blade_llm_server documents no flag for this; drop it, or pass your image's "
                "flag in llm.options"
            ]
    kv = kv_cache_quant(llm.kv_cache_dtype)
    if kv and kv not in KV_CACHE_QUANT:
        errors["llm.kv_cache_dtype"] = [
            f"BladeLLM's KV-cache quantizations are {', '.join(KV_CACHE_QUANT)}; not {kv!r}"
        ]
    if llm.speculative and llm.speculative.method != "draft_model":
        errors["llm.speculative.method"] = [
            "BladeLLM speculates with a draft model only (--decode_algo sps): set method "
            "draft_model and the draft in llm.speculative.model"
        ]
    return errors
