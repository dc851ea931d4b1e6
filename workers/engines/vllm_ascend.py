"""vLLM on Huawei Ascend NPUs: the same OpenAI server with the vllm-ascend plugin.

The container gets the NPUs as plain devices plus the host's driver, read-only, the way
ModelArts starts its vLLM containers (`docker run --device=/dev/davinci4 ... -v
/usr/local/Ascend/driver:/usr/local/Ascend/driver ...`).
"""

from __future__ import annotations

from controlplane.services.spec import Llm, ServiceSpec
from workers.engines.common import (
    OFFLINE_ENV,
    engine_image,
    engine_port,
    locate_draft,
    merge_mounts,
    shm_size,
    user_env,
)
from workers.engines.models import locate_model
from workers.engines.plan import ContainerPlan, Mount, Placement
from workers.engines.vllm import (
    SHM_DEFAULT,
    chunked_prefill_errors,
    server_args,
)

DEFAULT_PORT = 8000
# The plugin's own release image (docs.vllm.ai/projects/ascend: "docker pull
# quay.io/ascend/vllm-ascend:<tag>"); it carries CANN and torch_npu.
IMAGE = "quay.io/ascend/vllm-ascend:v0.23.0"
# Shared by every NPU on the host: the device manager, shared virtual memory, host-device channel.
CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
# The driver and npu-smi must be mounted together (ModelArts' guide); the paths are the host's.
# npu-smi is where the ModelArts guide finds it (the vllm-ascend docs use /usr/local/bin).
DRIVER_FILES = (
    "/usr/local/Ascend/driver",
    "/usr/local/dcmi",
    "/usr/local/sbin/npu-smi",
    "/etc/ascend_install.info",
)
# msModelSlim writes W8A8 (SmoothQuant-style), W4A16, W8A16 and W4A8 weights with a
# quant_model_description.json; `--quantization ascend` reads the scheme from it.
# LLM-Compressor's output is vLLM's own compressed-tensors format.
QUANTIZATIONS = {
    "ascend": "ascend",
    "w8a8": "ascend",
    "smoothquant": "ascend",
    "w4a16": "ascend",
    "w8a16": "ascend",
    "w4a8": "ascend",
    "compressed-tensors": "compressed-tensors",
}
# AWQ/GPTQ checkpoints are CUDA formats; on Ascend the same schemes come from msModelSlim.
CUDA_FORMATS = {"awq": "w4a16", "gptq": "w4a16"}
# The NPU attention kernel verifies at most 16 tokens a step: the drafts plus one.
MAX_SPECULATIVE_TOKENS = 15


def visible_devices(placement: Placement, cards: int) -> str:
    """ASCEND_RT_VISIBLE_DEVICES takes logical ids: a container numbers the NPUs it was
    given from 0, whatever their host index; a host process sees them all, by host index."""
    if placement.in_container or not placement.devices:
        return ",".join(str(i) for i in range(len(placement.devices) or cards))
    return ",".join(str(i) for i in placement.devices)


def npu_devices(placement: Placement) -> tuple[str, ...]:
    return tuple(f"/dev/davinci{i}" for i in placement.devices) + CONTROL_DEVICES


def driver_mounts() -> list[Mount]:
    return [Mount(kind="bind", target=path, source=path) for path in DRIVER_FILES]


def quantization_args(llm: Llm) -> list[str]:
    # An int8 KV cache (C8) is part of msModelSlim's output, read through --quantization
    # ascend: vLLM's --kv-cache-dtype has no int8 (ModelArts' own vLLM fork took
    # `--kv-cache-dtype int8`; with that image, pass it in llm.extra_args).
    method = QUANTIZATIONS.get(llm.quantization or "")
    return ["--quantization", method] if method else []


def render(spec: ServiceSpec, placement: Placement) -> ContainerPlan:
    llm = spec.llm
    assert llm is not None and llm.model is not None
    port = engine_port(spec, placement, DEFAULT_PORT)
    model_path, mounts = locate_model(llm.model, placement)
    draft_path, draft_mounts = locate_draft(llm, placement)
    args = server_args(
        spec, placement, port=port, model_path=model_path, draft_path=draft_path,
        quantization=quantization_args(llm),
    )  # fmt: skip
    env = {
        **OFFLINE_ENV,
        "ASCEND_RT_VISIBLE_DEVICES": visible_devices(placement, spec.metadata.npu),
    }
    env.update(user_env(spec))
    in_container = placement.in_container
    return ContainerPlan(
        image=engine_image(spec, IMAGE),
        args=args + llm.extra_args,
        port=port,
        env=env,
        mounts=merge_mounts(mounts, draft_mounts, driver_mounts() if in_container else []),
        health_path="/health",
        metrics_path="/metrics",
        shm_size_bytes=shm_size(spec.metadata.npu, SHM_DEFAULT),
        device_paths=npu_devices(placement) if in_container else (),
    )


def quantization_errors(llm: Llm) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    quantization, kv = llm.quantization, llm.kv_cache_dtype
    if quantization in CUDA_FORMATS:
        errors["llm.quantization"] = [
            f"{quantization} weights are a CUDA format; quantize the model with msModelSlim "
            f"to {CUDA_FORMATS[quantization]} and set llm.quantization to that"
        ]
    elif quantization and quantization not in QUANTIZATIONS:
        errors["llm.quantization"] = [
            f"vllm-ascend has no quantization {quantization!r}; choose one of "
            f"{', '.join(QUANTIZATIONS)}"
        ]
    if kv == "int8" and QUANTIZATIONS.get(quantization or "") != "ascend":
        errors["llm.kv_cache_dtype"] = [
            "an int8 KV cache comes with msModelSlim weights: quantize the model with its "
            "KV-cache int8 option and set llm.quantization (e.g. w8a8)"
        ]
    elif kv not in (None, "auto", "int8"):
        errors["llm.kv_cache_dtype"] = [f"Ascend NPUs have no {kv} KV cache; use int8 or auto"]
    return errors


def validate(spec: ServiceSpec) -> dict[str, list[str]]:
    llm = spec.llm
    assert llm is not None
    errors = {**chunked_prefill_errors(llm), **quantization_errors(llm)}
    if llm.speculative and llm.speculative.num_speculative_tokens > MAX_SPECULATIVE_TOKENS:
        errors["llm.speculative.num_speculative_tokens"] = [
            f"Ascend verifies at most {MAX_SPECULATIVE_TOKENS + 1} tokens a step; "
            f"speculate at most {MAX_SPECULATIVE_TOKENS}"
        ]
    return errors
