"""vLLM on Huawei Ascend NPUs: the same OpenAI server with the vllm-ascend plugin.

The container gets the NPUs as plain devices plus the host's driver, read-only, the way
ModelArts starts its vLLM containers (`docker run --device=/dev/davinci4 ... -v
/usr/local/Ascend/driver:/usr/local/Ascend/driver ...`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence

from contracts.engines.common import (
    OFFLINE_ENV,
    engine_image,
    engine_port,
    locate_models,
    merge_mounts,
    shm_size,
    user_env,
)
from contracts.engines.gang import as_member, preview_address, vllm_env
from contracts.engines.pd import on_host_network, pd_wiring, role_cards, validate_pd
from contracts.engines.plan import ContainerPlan, Mount, PdMember, Placement
from contracts.engines.rank_table import (
    global_rank_table,
    instance_of,
    local_rank_table,
    node_ports,
    preview_layout,
)
from contracts.engines.vllm import (
    ENGINE_KEY_ENV,
    SHM_DEFAULT,
    chunked_prefill_errors,
    engine_key_env,
    engine_key_errors,
    lora_env,
    lora_errors,
    server_args,
    traces_env,
)
from contracts.spec import Llm, ServiceSpec

DEFAULT_PORT = 8000
# The plugin's own release image (docs.vllm.ai/projects/ascend: "docker pull
# quay.io/ascend/vllm-ascend:<tag>"); it carries CANN and torch_npu.
IMAGE = "quay.io/ascend/vllm-ascend:v0.23.0"
# Shared by every NPU on the host: the device manager, shared virtual memory, host-device channel.
CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
# The driver and npu-smi must be mounted together (ModelArts' guide); the paths are the host's.
# npu-smi is wherever the node has it (Placement.npu_smi, see find_npu_smi).
DRIVER_FILES = ("/usr/local/Ascend/driver", "/usr/local/dcmi", "/etc/ascend_install.info")
# Where the driver's installer puts npu-smi: ModelArts' guide finds it in sbin, the
# vllm-ascend docs in bin.
NPU_SMI_PATHS = ("/usr/local/sbin/npu-smi", "/usr/local/bin/npu-smi")
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
# Where a rank-table deployment (llm.pd.rank_table) finds its tables, written by the runtime.
GLOBAL_RANK_TABLE = "/etc/wharf/ranktable/global.json"
LOCAL_RANK_TABLE = "/etc/wharf/ranktable/local.json"


def visible_devices(placement: Placement, cards: int) -> str:
    """ASCEND_RT_VISIBLE_DEVICES takes logical ids: a container numbers the NPUs it was
    given from 0, whatever their host index; a host process sees them all, by host index."""
    if placement.in_container or not placement.devices:
        return ",".join(str(i) for i in range(len(placement.devices) or cards))
    return ",".join(str(i) for i in placement.devices)


def npu_devices(placement: Placement) -> tuple[str, ...]:
    return tuple(f"/dev/davinci{i}" for i in placement.devices) + CONTROL_DEVICES


def find_npu_smi(places: Sequence[str] = NPU_SMI_PATHS) -> str:
    """This host's npu-smi: where the driver installs it (`places`), else on PATH; "" where it
    has none."""
    for path in places:
        if os.path.isfile(path):
            return path
    return shutil.which("npu-smi") or ""


def driver_mounts(placement: Placement | None = None) -> list[Mount]:
    """The host's driver files, and npu-smi where the node has it (without a placement: where
    ModelArts' guide finds it), each at its own path."""
    npu_smi = (placement or Placement()).npu_smi
    paths = DRIVER_FILES + ((npu_smi,) if npu_smi else ())
    return [Mount(kind="bind", target=path, source=path) for path in paths]


def quantization_args(llm: Llm) -> list[str]:
    # An int8 KV cache (C8) is part of msModelSlim's output, read through --quantization
    # ascend: vLLM's --kv-cache-dtype has no int8 (ModelArts' own vLLM fork took
    # `--kv-cache-dtype int8`; with that image, pass it in llm.extra_args).
    method = QUANTIZATIONS.get(llm.quantization or "")
    return ["--quantization", method] if method else []


def own_member(placement: Placement, port: int) -> PdMember:
    member = placement.gang
    return PdMember(
        role=placement.role,
        index=placement.pd_index,
        host_ip=placement.node_ip or (member.ip if member else "") or "localhost",
        device_ids=placement.devices,
        port=port,
        rank=member.rank if member else 0,
    )


def pd_layout(spec: ServiceSpec, placement: Placement, port: int) -> tuple[PdMember, ...]:
    """The worker's layout of the whole service; the preview's stand-in when it has none
    (for an instance across hosts: member r of every instance on the preview's node r)."""
    if placement.pd_layout:
        return placement.pd_layout
    assert spec.llm is not None and spec.llm.pd is not None
    pd = spec.llm.pd
    counts = {role: (pd.role(role).instance, pd.role(role).npu) for role in ("prefill", "decode")}
    own = own_member(placement, port)
    member = placement.gang
    hosts = (
        tuple(own.host_ip if r == member.rank else preview_address(r) for r in range(member.size))
        if member
        else ()
    )
    return preview_layout(counts, own, hosts)


def rank_tables(
    spec: ServiceSpec, placement: Placement, port: int
) -> tuple[dict[str, str], dict[str, str]]:
    """seeds/000's rank-table deployment: the files (container path -> JSON) and the env
    that points the engine at them; nothing unless llm.pd.rank_table and a role. A member of
    an instance across hosts reads the same tables as its leader (contracts.engines.rank_table:
    its local table is its instance's servers)."""
    llm = spec.llm
    if llm is None or llm.pd is None or not llm.pd.rank_table or not placement.role:
        return {}, {}
    layout = pd_layout(spec, placement, port)
    mine = own_member(placement, port)
    key = (mine.role, mine.index, mine.rank)
    own = next((m for m in layout if (m.role, m.index, m.rank) == key), mine)
    scheduler = placement.router_ip or "localhost"
    files = {
        GLOBAL_RANK_TABLE: json.dumps(global_rank_table(layout, scheduler), indent=2),
        LOCAL_RANK_TABLE: json.dumps(local_rank_table(*instance_of(layout, own)), indent=2),
    }
    env = {
        "GLOBAL_RANK_TABLE_FILE_PATH": GLOBAL_RANK_TABLE,
        "RANK_TABLE_FILE_PATH": LOCAL_RANK_TABLE,
        "NODE_PORTS": node_ports(layout),
    }
    return files, env


def render(spec: ServiceSpec, placement: Placement) -> ContainerPlan:
    llm = spec.llm
    assert llm is not None and llm.model is not None
    port = engine_port(spec, placement, DEFAULT_PORT)
    models = locate_models(llm, placement)
    args = server_args(
        spec, placement, port=port, models=models, quantization=quantization_args(llm)
    )
    cards = role_cards(spec, placement, "npu")
    kv_env, kv_mounts = pd_wiring(spec, placement, port)
    files, table_env = rank_tables(spec, placement, port)
    env = {
        **OFFLINE_ENV,
        "ASCEND_RT_VISIBLE_DEVICES": visible_devices(placement, cards),
        **kv_env,
        **table_env,
        **lora_env(llm, placement),
        **traces_env(spec, placement),
        **vllm_env(placement.gang, ascend=True),
    }
    env.update(user_env(spec))
    env.update(engine_key_env(placement))
    in_container = placement.in_container
    drivers = driver_mounts(placement) if in_container else []
    plan = ContainerPlan(
        image=engine_image(spec, IMAGE),
        args=args + llm.extra_args,
        port=port,
        env=env,
        mounts=merge_mounts(models.mounts, drivers, kv_mounts),
        health_path="/health",
        metrics_path="/metrics",
        shm_size_bytes=shm_size(cards, SHM_DEFAULT),
        device_paths=npu_devices(placement) if in_container else (),
        files=files,
        secret_env=(ENGINE_KEY_ENV,),
        host_network=on_host_network(spec, placement),
    )
    return as_member(plan, placement.gang)


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
    errors = {
        **chunked_prefill_errors(llm), **quantization_errors(llm), **validate_pd(spec),
        **engine_key_errors(spec), **lora_errors(llm),
    }  # fmt: skip
    if llm.speculative and llm.speculative.num_speculative_tokens > MAX_SPECULATIVE_TOKENS:
        errors["llm.speculative.num_speculative_tokens"] = [
            f"Ascend verifies at most {MAX_SPECULATIVE_TOKENS + 1} tokens a step; "
            f"speculate at most {MAX_SPECULATIVE_TOKENS}"
        ]
    return errors
