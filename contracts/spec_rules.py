"""The rules of a spec that span its sections (an llm section's cards and parallelism,
prefill/decode roles, mounts), checked by contracts.spec.parse_spec after the schema."""

from __future__ import annotations

from contracts.spec import GPU_ENGINES, PD_ENGINES, ROLES, Llm, ServiceSpec


def cross_checks(spec: ServiceSpec) -> dict[str, list[str]]:
    """Rules that span sections."""
    errors: dict[str, list[str]] = {}
    if spec.llm is None:
        if not spec.containers:
            errors["containers"] = ["give at least one container, or an llm section"]
        for i, container in enumerate(spec.containers):
            if not container.image:
                errors[f"containers[{i}].image"] = ["an image is required without an llm section"]
            if not (container.command or container.script):
                errors[f"containers[{i}].command"] = [
                    "a command or script is required without an llm section"
                ]
    if spec.llm is not None:
        errors.update(_llm_checks(spec))
    if len(spec.containers) > 1:
        errors.setdefault("containers", []).append("one container per instance is supported")
    mounts = [entry.mount_path.rstrip("/") or "/" for entry in spec.storage]
    for i, mount in enumerate(mounts):
        if mount in mounts[:i]:
            errors[f"storage[{i}].mount_path"] = [f"{mount} is mounted twice"]
    if spec.metadata.shm_size and "/dev/shm" in mounts:
        errors["metadata.shm_size"] = ["shared memory is set twice: here and as /dev/shm storage"]
    return errors


def _llm_checks(spec: ServiceSpec) -> dict[str, list[str]]:
    llm = spec.llm
    assert llm is not None
    errors: dict[str, list[str]] = {}
    container = spec.containers[0] if spec.containers else None
    custom_command = bool(container and (container.command or container.script))
    if not llm.model and not custom_command and llm.engine != "custom":
        need = "a draft model needs a main model: " if llm.speculative else ""
        errors["llm.model"] = [f"{need}give the model to serve"]
    if llm.engine == "custom" and not custom_command:
        errors["containers[0].command"] = ["the custom engine runs the given image and command"]
    if llm.pd is not None:
        errors.update(_pd_checks(llm))
        return errors
    cards, kind = (spec.metadata.npu, "npu") if llm.engine == "vllm-ascend" else (
        spec.metadata.gpu, "gpu"
    )  # fmt: skip
    if llm.engine in GPU_ENGINES + ("vllm-ascend",) and cards < 1:
        alt = "; or use engine vllm-cpu" if llm.engine == "vllm" else ""
        errors[f"metadata.{kind}"] = [
            f"engine {llm.engine} runs on {kind.upper()}s: set at least 1{alt}"
        ]
    elif llm.tensor_parallel_size > max(cards, 1) and llm.engine != "vllm-cpu":
        errors["llm.tensor_parallel_size"] = [
            f"tensor parallelism {llm.tensor_parallel_size} needs as many cards; "
            f"metadata.{kind} is {cards}"
        ]
    return errors


def _pd_checks(llm: Llm) -> dict[str, list[str]]:
    """Cards and parallelism are per role in a prefill/decode-separated service."""
    assert llm.pd is not None
    errors: dict[str, list[str]] = {}
    if llm.engine not in PD_ENGINES:
        errors["llm.pd"] = [
            f"engine {llm.engine} does not support prefill/decode separation; "
            f"use one of {', '.join(PD_ENGINES)}, or remove llm.pd"
        ]
        return errors
    if llm.pd.rank_table and llm.engine != "vllm-ascend":
        errors["llm.pd.rank_table"] = [
            "rank tables describe Ascend NPUs: they need engine vllm-ascend on NPU hosts"
        ]
    kind = "npu" if llm.engine == "vllm-ascend" else "gpu"
    for name in ROLES:
        role = llm.pd.role(name)
        cards = getattr(role, kind)
        if llm.engine != "vllm-cpu" and cards < 1:
            errors[f"llm.pd.{name}.{kind}"] = [
                f"each {name} instance of engine {llm.engine} needs at least 1 {kind.upper()}"
            ]
        elif llm.engine != "vllm-cpu" and role.tensor_parallel_size > cards:
            errors[f"llm.pd.{name}.tensor_parallel_size"] = [
                f"tensor parallelism {role.tensor_parallel_size} needs as many cards; "
                f"llm.pd.{name}.{kind} is {cards}"
            ]
    return errors
