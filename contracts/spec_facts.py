"""Facts derived from a parsed spec, in one place for the API, the scheduler and the starter:
never read again from the raw spec with its defaults copied."""

from __future__ import annotations

from contracts.spec import ServiceSpec


def replicas(spec: ServiceSpec) -> dict[str, int]:
    """Instances wanted per role: prefill and decode for a separated service, else "" alone."""
    pd = spec.llm.pd if spec.llm else None
    if pd:
        return {"prefill": pd.prefill.instance, "decode": pd.decode.instance}
    return {"": spec.metadata.instance}


def card_need(spec: ServiceSpec, role: str = "") -> tuple[str, int]:
    """The kind and number of cards one instance (of `role`) holds exclusively."""
    if role and spec.llm and spec.llm.pd:
        pd_role = spec.llm.pd.role(role)
        if spec.llm.engine == "vllm-ascend":
            return "npu", pd_role.npu
        return "gpu", pd_role.gpu
    if spec.llm and spec.llm.engine == "vllm-ascend":
        return "npu", spec.metadata.npu
    if spec.metadata.npu and not spec.metadata.gpu:
        return "npu", spec.metadata.npu
    return "gpu", spec.metadata.gpu


def model_name(spec: ServiceSpec) -> str:
    """The name callers put in `model`: the served model name, else the service's name."""
    return spec.served_model_names[0] if spec.served_model_names else spec.name
