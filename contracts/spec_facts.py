"""Facts derived from a parsed spec, in one place for the API, the scheduler and the starter:
never read again from the raw spec with its defaults copied."""

from __future__ import annotations

from contracts.spec import ROLES, ServiceSpec
from contracts.spec_fleet import MAX_INSTANCES
from contracts.spec_scaling import Autoscaler


def replicas(spec: ServiceSpec, autoscale: dict | None = None) -> dict[str, int]:
    """Instances wanted per role: prefill and decode for a separated service, else "" alone.
    An autoscaled role wants what its autoscaler last decided (`autoscale`, the service's
    {role: workers.scaling.autoscaler.State JSON}), within its min..max; a service with a cronscaler
    alone, what its schedule last set; until either decides, what the spec starts with."""
    pd = spec.llm.pd if spec.llm else None
    if pd:
        counts = {"prefill": pd.prefill.instance, "decode": pd.decode.instance}
    else:
        counts = {"": spec.metadata.instance}
    bounds = {role: (scaler.min, scaler.max) for role, (_, scaler) in autoscalers(spec).items()}
    if spec.cronscaler is not None and not pd:
        bounds.setdefault("", (0, MAX_INSTANCES))  # the schedule's count, unscaled otherwise
    for role, (low, high) in bounds.items():
        decided = (autoscale or {}).get(role)
        count = decided.get("replicas") if isinstance(decided, dict) else None
        if isinstance(count, int) and not isinstance(count, bool):
            counts[role] = min(max(count, low), high)
    return counts


def autoscalers(spec: ServiceSpec) -> dict[str, tuple[str, Autoscaler]]:
    """Each autoscaled role's autoscaler and where the spec gives it: a prefill/decode role's
    own (llm.pd.<role>.autoscaler), else the service's (autoscaler)."""
    pd = spec.llm.pd if spec.llm else None
    if pd is None:
        return {"": ("autoscaler", spec.autoscaler)} if spec.autoscaler else {}
    found = {}
    for role in ROLES:
        own = pd.role(role).autoscaler
        if own is not None:
            found[role] = (f"llm.pd.{role}.autoscaler", own)
        elif spec.autoscaler is not None:
            found[role] = ("autoscaler", spec.autoscaler)
    return found


def routing_policy(spec: ServiceSpec) -> str:
    """How the gateway picks an instance (the prefill leg's, in a prefill/decode service)."""
    rpc = spec.metadata.rpc
    if rpc and rpc.routing:
        return rpc.routing
    if spec.llm and spec.llm.pd:
        return spec.llm.pd.router.prefill_policy
    return "least_outstanding"


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


def model_refs(spec: ServiceSpec) -> list[tuple[str, str]]:
    """(field, reference) of every model the spec serves: the model, the draft model, the
    LoRA adapters, in that order (how nodes stage them and errors name them)."""
    llm = spec.llm
    if llm is None:
        return []
    found = [("llm.model", llm.model)]
    if llm.speculative:
        found.append(("llm.speculative.model", llm.speculative.model))
    for i, adapter in enumerate(llm.lora.adapters if llm.lora else []):
        found.append((f"llm.lora.adapters[{i}].model", adapter.model))
    return [(where, ref) for where, ref in found if ref]


def adapter_names(spec: ServiceSpec) -> tuple[str, ...]:
    """The LoRA adapters the spec serves, in its order."""
    lora = spec.llm.lora if spec.llm else None
    return tuple(a.name for a in lora.adapters) if lora else ()


def model_ids(spec: ServiceSpec) -> dict[str, str]:
    """Every OpenAI `model` value that reaches this service (its name, its served name, and
    '<either>:<adapter>' for each LoRA adapter), each with the field that makes it: one
    service's alone, platform-wide, or callers of one would reach another."""
    ids = {spec.name: "name"}
    ids.update({served: "llm.served_model_name" for served in spec.served_model_names})
    for i, adapter in enumerate(adapter_names(spec)):
        for model in (spec.name, *spec.served_model_names):
            ids.setdefault(f"{model}:{adapter}", f"llm.lora.adapters[{i}].name")
    return ids


def reserved_cpu(spec: ServiceSpec) -> float:
    """The CPUs placement reserves for an instance: none with qos BestEffort (instances share
    the node's CPUs; cpu is each one's cap)."""
    return 0.0 if spec.metadata.qos == "BestEffort" else (spec.metadata.cpu or 0.0)


def spread_policy(spec: ServiceSpec) -> str:
    """metadata.scheduling.spread.policy: default, host or zone."""
    scheduling = spec.metadata.scheduling
    return scheduling.spread.policy if scheduling else "default"
