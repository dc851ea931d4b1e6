"""vLLM's OpenAI-compatible server: `vllm` (CUDA image) and `vllm-cpu` (its CPU build)."""

from __future__ import annotations

from controlplane.services.spec import ServiceSpec
from workers.engines.plan import ContainerPlan, Mount, Placement

DEFAULT_PORT = 8000
SHM_DEFAULT = 1024**3
IMAGES = {"vllm": "vllm/vllm-openai:v0.32.0", "vllm-cpu": "wharf/vllm-cpu:0.32.0"}


def model_location(model: str, placement: Placement) -> tuple[str, list[Mount]]:
    """The model path the engine reads, and the mount that puts the model there."""
    if model.startswith("/"):
        return model, []  # provided by one of the spec's storage mounts
    target = f"{placement.models_root.rstrip('/')}/{model}"
    return target, [Mount(kind="model", source=model, target=f"/models/{model}")]


def render(spec: ServiceSpec, placement: Placement, image: str | None = None) -> ContainerPlan:
    llm = spec.llm
    assert llm is not None
    container = spec.containers[0] if spec.containers else None
    port = placement.port or (container.port if container and container.port else DEFAULT_PORT)
    model_path, mounts = model_location(llm.model, placement)
    args = [
        "python", "-m", "vllm.entrypoints.openai.api_server",
        "--model", model_path,
        "--host", placement.host,
        "--port", str(port),
        # The gateway routes by either name and passes `model` through, so the engine answers
        # to both.
        "--served-model-name", *dict.fromkeys([llm.served_model_name or spec.name, spec.name]),
    ]  # fmt: skip
    if llm.tensor_parallel_size > 1:
        args += ["--tensor-parallel-size", str(llm.tensor_parallel_size)]
    if llm.max_model_len:
        args += ["--max-model-len", str(llm.max_model_len)]
    if llm.gpu_memory_utilization and llm.engine == "vllm":
        args += ["--gpu-memory-utilization", str(llm.gpu_memory_utilization)]
    if llm.max_num_seqs:
        args += ["--max-num-seqs", str(llm.max_num_seqs)]
    if llm.dtype:
        args += ["--dtype", llm.dtype]
    # Models come from the node's model store or a mount, never from a hub; and no engine
    # phones home.
    env = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    env.update({e.name: e.value for e in (container.env if container else [])})
    if llm.engine == "vllm-cpu":
        # The CPU image has no C compiler for torch.compile; eager mode starts in seconds.
        if "--enforce-eager" not in llm.extra_args:
            args.append("--enforce-eager")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's default of 4 is too much here
    args += llm.extra_args
    return ContainerPlan(
        image=image or (container.image if container and container.image else IMAGES[llm.engine]),
        args=args,
        port=port,
        env=env,
        mounts=mounts,
        health_path="/health",
        metrics_path="/metrics",
        # vLLM needs more than Docker's default 64 MiB of /dev/shm (160 MiB on CPU; NCCL more).
        shm_size_bytes=SHM_DEFAULT,
    )
