"""PaddleNLP LLM serving: a Triton-based server for exported static-graph Paddle models.

It is configured by environment variables, not flags (PaddleNLP's "静态图高性能部署全流程"),
and serves OpenAI-style HTTP on SERVICE_HTTP_PORT beside its health, gRPC, metrics and
internal ports.
"""

from __future__ import annotations

from contracts.engines.common import (
    GIB,
    engine_image,
    engine_port,
    locate_models,
    shm_size,
    user_env,
)
from contracts.engines.plan import ContainerPlan, Placement
from contracts.spec import Llm, ServiceSpec

DEFAULT_PORT = 9965  # SERVICE_HTTP_PORT's default
# Inside the instance's own network namespace, so PaddleNLP's documented ports serve as they are.
AUX_PORTS = {
    "HEALTH_HTTP_PORT": 8110,  # /v2/health/live and /v2/health/ready
    "SERVICE_GRPC_PORT": 8811,
    "METRICS_HTTP_PORT": 8722,
    "INTER_PROC_PORT": 8813,
}
# Images before PaddleNLP 3.0.0 read the older names; the start script prefers them if set, so
# both carry the same value.
LEGACY_PORT_NAMES = {
    "HEALTH_HTTP_PORT": "HTTP_PORT",
    "SERVICE_GRPC_PORT": "GRPC_PORT",
    "METRICS_HTTP_PORT": "METRICS_PORT",
    "INTER_PROC_PORT": "INTER_QUEUE_PORT",
    "SERVICE_HTTP_PORT": "PUSH_MODE_HTTP_PORT",
}
IMAGE = (
    "ccr-2vdh3abv-pub.cnc.bj.baidubce.com/paddlepaddle/paddlenlp:llm-serving-cuda124-cudnn9-v2.3"
)
# start_server launches the server in the background and returns; the container lives on
# while it serves, as PaddleNLP's own `docker run ... start_server && tail -f /dev/null`.
COMMAND = ["/bin/bash", "-c", "start_server && tail -f /dev/null"]
MAX_BATCH_SIZE = 128  # BATCH_SIZE "不能高于128"
SHM_MIN = 5 * GIB  # "请保证 shm-size >= 5，不然可能会导致服务启动失败"
# PaddleNLP speculates only with a static model exported for it; these override its method.
SPECULATIVE_METHODS = ("mtp", "eagle")
# Fixed when the static graph is exported, or not PaddleNLP's to set.
UNSUPPORTED = {
    "quantization": "the quantization is fixed when the static model is exported "
    "(e.g. weight_only_int8); export it quantized and drop llm.quantization",
    "dtype": "the dtype is fixed when the static model is exported; drop llm.dtype",
    "gpu_memory_utilization": "PaddleNLP sizes its KV cache in blocks: set BLOCK_BS in "
    "containers[0].env instead",
    "max_num_batched_tokens": "PaddleNLP has no batched-token budget; drop it",
    "enable_chunked_prefill": "PaddleNLP has no chunked prefill; drop it",
    "chunked_prefill_size": "PaddleNLP has no chunked prefill; drop it",
    "options": "PaddleNLP takes no flags; set its variables in containers[0].env",
    "extra_args": "PaddleNLP takes no flags; set its variables in containers[0].env",
}


def visible_gpus(placement: Placement, cards: int) -> str:
    """Docker renumbers the GPUs it hands a container from 0; a host process sees host ids."""
    if placement.in_container or not placement.devices:
        return ",".join(str(i) for i in range(len(placement.devices) or cards))
    return ",".join(str(i) for i in placement.devices)


def port_env(port: int) -> dict[str, str]:
    ports = {**AUX_PORTS, "SERVICE_HTTP_PORT": port}
    env = {name: str(value) for name, value in ports.items()}
    env.update({LEGACY_PORT_NAMES[name]: str(value) for name, value in ports.items()})
    return env


def serving_env(llm: Llm, placement: Placement, model_path: str) -> dict[str, str]:
    env = {
        "MODEL_DIR": model_path,
        "MP_NUM": str(llm.tensor_parallel_size),
        "CUDA_VISIBLE_DEVICES": visible_gpus(placement, llm.tensor_parallel_size),
    }
    if llm.max_model_len:
        # PaddleNLP refuses prompts longer than MAX_SEQ_LEN; the model's exported length
        # bounds prompt plus output.
        env["MAX_SEQ_LEN"] = str(llm.max_model_len)
    if llm.max_num_seqs:
        env["BATCH_SIZE"] = str(llm.max_num_seqs)
    if llm.kv_cache_dtype == "int8":
        env["USE_CACHE_KV_INT8"] = "1"  # for c8-quantized models
    return env


def speculative_env(llm: Llm, draft_path: str | None) -> dict[str, str]:
    if llm.speculative is None or draft_path is None:
        return {}
    return {
        "SPECULATE_METHOD": llm.speculative.method,
        "SPECULATE_MAX_DRAFT_TOKEN_NUM": str(llm.speculative.num_speculative_tokens),
        "SPECULATE_MODEL_PATH": draft_path,
    }


def render(spec: ServiceSpec, placement: Placement) -> ContainerPlan:
    llm = spec.llm
    assert llm is not None and llm.model is not None
    port = engine_port(spec, placement, DEFAULT_PORT)
    models = locate_models(llm, placement)
    env = {
        **port_env(port),
        **serving_env(llm, placement, models.path),
        **speculative_env(llm, models.draft),
        **user_env(spec),  # MAX_DEC_LEN, BLOCK_BS, MAX_CACHED_TASK_NUM, ... as the user sets them
    }
    return ContainerPlan(
        image=engine_image(spec, IMAGE),
        args=list(COMMAND),
        port=port,
        env=env,
        mounts=models.mounts,
        # /v2/health/ready is served on HEALTH_HTTP_PORT, not on the port the gateway reaches:
        # a TCP check on SERVICE_HTTP_PORT.
        health_path="",
        metrics_path=None,  # on METRICS_HTTP_PORT
        shm_size_bytes=shm_size(spec.metadata.gpu, SHM_MIN),
        gpus=placement.devices,
    )


def validate(spec: ServiceSpec) -> dict[str, list[str]]:
    llm = spec.llm
    assert llm is not None
    errors = {
        f"llm.{field}": [message]
        for field, message in UNSUPPORTED.items()
        if getattr(llm, field) not in (None, [], {})
        and not (field == "dtype" and llm.dtype == "auto")
    }
    if llm.max_num_seqs and llm.max_num_seqs > MAX_BATCH_SIZE:
        errors["llm.max_num_seqs"] = [f"PaddleNLP batches at most {MAX_BATCH_SIZE} requests"]
    if llm.kv_cache_dtype not in (None, "auto", "int8"):
        errors["llm.kv_cache_dtype"] = ["PaddleNLP's KV cache is the model's dtype or int8"]
    speculative = llm.speculative
    if speculative and speculative.method not in SPECULATIVE_METHODS:
        errors["llm.speculative.method"] = [
            f"PaddleNLP speculates with {' or '.join(SPECULATIVE_METHODS)} only, from a model "
            "exported for it"
        ]
    elif speculative and not speculative.model:
        errors["llm.speculative.model"] = [
            "PaddleNLP reads the exported MTP weights from their own directory; give it here"
        ]
    return errors
