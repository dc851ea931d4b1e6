"""The rules of a spec that span its sections (an llm section's cards and parallelism,
prefill/decode roles, mounts), checked by contracts.spec.parse_spec after the schema."""

from __future__ import annotations

from contracts import spec_facts
from contracts.hub_refs import is_hub_ref
from contracts.spec import GPU_ENGINES, PD_ENGINES, ROLES, Llm, ServiceSpec
from contracts.spec_probes import probe_conflicts
from contracts.spec_queue import is_async, queue_rules
from contracts.spec_scaling import Autoscaler
from contracts.spec_sidecars import sidecar_rules
from contracts.spec_unit import EXPERT_PARALLEL_ENGINES, MULTI_HOST_ENGINES


def cross_checks(spec: ServiceSpec) -> dict[str, list[str]]:
    """Rules that span sections."""
    errors: dict[str, list[str]] = {}
    if spec.llm is None:
        if not spec.containers:
            errors["containers"] = ["give at least one container, or an llm section"]
        for i, container in enumerate(spec.containers):
            if not container.image:
                errors[f"containers[{i}].image"] = ["an image is required without an llm section"]
            # Without one, the image's own entrypoint runs (as EAS runs it); the process
            # runtime has no image to take one from (runtime_checks).
    if spec.llm is not None:
        errors.update(_llm_checks(spec))
    errors.update(sidecar_rules(spec))  # containers[1:], beside the main one
    mounts = [entry.mount_path.rstrip("/") or "/" for entry in spec.storage]
    for i, mount in enumerate(mounts):
        if mount in mounts[:i]:
            errors[f"storage[{i}].mount_path"] = [f"{mount} is mounted twice"]
    if spec.metadata.shm_size and "/dev/shm" in mounts:
        errors["metadata.shm_size"] = ["shared memory is set twice: here and as /dev/shm storage"]
    errors.update(_scaling_checks(spec))
    errors.update(_unit_checks(spec))
    errors.update(queue_rules(spec))
    first = spec.containers[0] if spec.containers else None
    errors.update(probe_conflicts("health_check" in spec.model_fields_set, first))
    return errors


# Engines whose own metrics Wharf reads (contracts.engine_metrics): the signals queue and
# kv_cache, and the kv_cache_load policy, need them.
METRICS_ENGINES = ("vllm", "vllm-cpu", "vllm-ascend", "sglang")


def _scaling_checks(spec: ServiceSpec) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    engine = spec.llm.engine if spec.llm else None
    reads_metrics = engine in METRICS_ENGINES
    rpc = spec.metadata.rpc
    if rpc and rpc.session_header and rpc.routing != "session":
        errors["metadata.rpc.session_header"] = ["a session header is read by routing session"]
    pd = spec.llm.pd if spec.llm else None
    policies: dict[str, str | None] = {"metadata.rpc.routing": rpc.routing if rpc else None}
    if pd:
        policies["llm.pd.router.prefill_policy"] = pd.router.prefill_policy
        chosen = {p for p in policies.values() if p and p != "least_outstanding"}
        if len(chosen) > 1:
            errors["metadata.rpc.routing"] = [
                "the prefill leg's policy is given twice, differently: here and in "
                "llm.pd.router.prefill_policy"
            ]
    for where, policy in policies.items():
        if policy == "kv_cache_load" and not reads_metrics:
            errors[where] = [f"kv_cache_load reads the engine's metrics; engine {engine} has none "
                             f"Wharf reads (use {', '.join(METRICS_ENGINES)})"]  # fmt: skip
    if spec.cronscaler is not None and pd is not None:
        errors["cronscaler"] = [
            "a prefill/decode service scales each role on its own: give llm.pd.<role>.autoscaler"
        ]
    for source, scaler, instance, instance_field in _scalers(spec):
        if not scaler.min <= instance <= scaler.max:
            errors[instance_field] = [
                f"starting with {instance} is outside the autoscaler's {scaler.min}..{scaler.max} "
                f"({source})"
            ]
        for i, strategy in enumerate(scaler.scaleStrategies):
            # An Async service's queue is its own input queue (contracts.spec_queue).
            from_queue = strategy.metricName == "queue" and is_async(spec)
            if (
                strategy.metricName in ("queue", "kv_cache")
                and not reads_metrics
                and not from_queue
            ):
                errors[f"{source}.scaleStrategies[{i}].metricName"] = [
                    f"{strategy.metricName} is read from the engine's metrics; engine {engine} "
                    "has none Wharf reads: use qps or concurrency"
                ]
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
    if llm.lora is not None:
        errors.update(_lora_checks(spec))
    if llm.hub_token and not any(is_hub_ref(r) for _, r in spec_facts.model_refs(spec)):
        errors["llm.hub_token"] = ["no model of this spec is on a hub (hf://, modelscope://); "
                                   "remove the token"]  # fmt: skip
    if llm.pd is not None:
        errors.update(_pd_checks(spec))
        return errors
    cards, kind = (spec.metadata.npu, "npu") if llm.engine == "vllm-ascend" else (
        spec.metadata.gpu, "gpu"
    )  # fmt: skip
    if llm.engine in GPU_ENGINES + ("vllm-ascend",) and cards < 1:
        alt = "; or use engine vllm-cpu" if llm.engine == "vllm" else ""
        errors[f"metadata.{kind}"] = [
            f"engine {llm.engine} runs on {kind.upper()}s: set at least 1{alt}"
        ]
    elif spec.unit_size() > 1:
        errors.update(_gang_cards(spec, "", cards, f"metadata.{kind}"))
    elif llm.tensor_parallel_size > max(cards, 1) and llm.engine != "vllm-cpu":
        errors["llm.tensor_parallel_size"] = [
            f"tensor parallelism {llm.tensor_parallel_size} needs as many cards; "
            f"metadata.{kind} is {cards}"
        ]
    elif _card_count(llm, llm.tensor_parallel_size) > max(cards, 1) and llm.engine != "vllm-cpu":
        errors["llm.pipeline_parallel_size"] = [
            f"tensor {llm.tensor_parallel_size} x pipeline {llm.pipeline_parallel_size} "
            f"parallelism needs as many cards; metadata.{kind} is {cards} (or span hosts with "
            "unit.size)"
        ]
    return errors


def _card_count(llm: Llm, tensor_parallel_size: int) -> int:
    """Cards (or, on CPU, processes) one copy of the model is split over."""
    return tensor_parallel_size * llm.pipeline_parallel_size


def _unit_checks(spec: ServiceSpec) -> dict[str, list[str]]:
    """Parallelism only where the engine renders it, and an instance across hosts (unit.size
    > 1) only with an engine Wharf starts across them."""
    llm = spec.llm
    errors: dict[str, list[str]] = {}
    if llm and llm.pipeline_parallel_size > 1 and llm.engine not in MULTI_HOST_ENGINES:
        errors["llm.pipeline_parallel_size"] = [
            f"engine {llm.engine} has no pipeline parallelism Wharf renders; use one of "
            f"{', '.join(MULTI_HOST_ENGINES)}, or pipeline_parallel_size 1"
        ]
    if llm and llm.enable_expert_parallel and llm.engine not in EXPERT_PARALLEL_ENGINES:
        errors["llm.enable_expert_parallel"] = [
            f"engine {llm.engine} has no expert parallelism Wharf renders; use one of "
            f"{', '.join(EXPERT_PARALLEL_ENGINES)}, or give the engine's own flag in llm.options"
        ]
    if spec.unit_size() > 1:
        errors.update(_across_hosts(spec))
    return errors


def _across_hosts(spec: ServiceSpec) -> dict[str, list[str]]:
    llm, size = spec.llm, spec.unit_size()
    if spec.metadata.workload_type is not None:
        return {"unit.size": [
            "a job (elasticjob) runs on one host: its end and retries are not kept in step "
            "across hosts yet; use unit.size 1, or deploy it as a service"
        ]}  # fmt: skip
    container = spec.containers[0] if spec.containers else None
    if llm is None or llm.engine not in MULTI_HOST_ENGINES:
        engine = f"engine {llm.engine}" if llm else "a service without an llm section"
        return {"unit.size": [
            f"{engine} cannot start one instance across {size} hosts; use an llm engine of "
            f"{', '.join(MULTI_HOST_ENGINES)}, or unit.size 1"
        ]}  # fmt: skip
    if container and (container.command or container.script):
        return {"unit.size": [
            "a given command runs as it is, on one host: Wharf renders each host's command "
            "only for the engines it starts; remove containers[0].command or use unit.size 1"
        ]}  # fmt: skip
    return {}


def _gang_cards(spec: ServiceSpec, role: str, cards: int, where: str) -> dict[str, list[str]]:
    """With unit.size N > 1: N machines x `cards` each (per machine, as in EAS) hold one copy
    of the model, split tensor x pipeline parallel; on CPU each machine runs as many of the
    copy's processes as the others."""
    llm = spec.llm
    assert llm is not None
    size = spec.unit_size()
    tp = llm.pd.role(role).tensor_parallel_size if llm.pd and role else llm.tensor_parallel_size
    field = f"llm.pd.{role}.tensor_parallel_size" if role else "unit.size"
    parallel = _card_count(llm, tp)
    if llm.engine == "vllm-cpu":
        if parallel % size == 0:
            return {}
        return {field: [
            f"tensor {tp} x pipeline {llm.pipeline_parallel_size} parallelism is {parallel} "
            f"processes, which {size} hosts cannot share evenly; e.g. llm.pipeline_parallel_size "
            f"{size} with tensor_parallel_size 1"
        ]}  # fmt: skip
    if cards * size == parallel:
        return {}
    per_host = f"{where} {cards} per machine"
    fit = (
        f"e.g. tensor_parallel_size {cards} and pipeline_parallel_size {size}"
        if cards
        else f"set {where} to at least 1"
    )
    return {field: [
        f"unit.size {size} machines x {per_host} is {cards * size} cards, and tensor {tp} x "
        f"pipeline {llm.pipeline_parallel_size} parallelism uses {parallel}: make them equal, "
        f"{fit}"
    ]}  # fmt: skip


# Engines that serve LoRA adapters beside their base model (contracts.engines renders them).
LORA_ENGINES = ("vllm", "vllm-cpu", "vllm-ascend", "tgi")


def _lora_checks(spec: ServiceSpec) -> dict[str, list[str]]:
    llm = spec.llm
    assert llm is not None and llm.lora is not None
    if llm.engine not in LORA_ENGINES:
        return {"llm.lora": [f"engine {llm.engine} serves no LoRA adapters; use one of "
                             f"{', '.join(LORA_ENGINES)}, or remove llm.lora"]}  # fmt: skip
    if llm.pd is not None:
        return {"llm.lora": ["LoRA adapters are not served with prefill/decode separation yet; "
                             "remove llm.lora or llm.pd"]}  # fmt: skip
    errors: dict[str, list[str]] = {}
    taken = {spec.name, *spec.served_model_names}  # the engine's names for the base model
    for i, adapter in enumerate(llm.lora.adapters):
        if adapter.name in taken:
            errors[f"llm.lora.adapters[{i}].name"] = [
                f"{adapter.name!r} names the base model already; give the adapter its own name"
            ]
    return errors


def _pd_checks(spec: ServiceSpec) -> dict[str, list[str]]:
    """Cards and parallelism are per role in a prefill/decode-separated service; unit.size
    spans hosts with each role's instances alike."""
    llm = spec.llm
    assert llm is not None and llm.pd is not None
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
        elif spec.unit_size() > 1:
            errors.update(_gang_cards(spec, name, cards, f"llm.pd.{name}.{kind}"))
        elif llm.engine != "vllm-cpu" and role.tensor_parallel_size > cards:
            errors[f"llm.pd.{name}.tensor_parallel_size"] = [
                f"tensor parallelism {role.tensor_parallel_size} needs as many cards; "
                f"llm.pd.{name}.{kind} is {cards}"
            ]
        elif llm.engine != "vllm-cpu" and _card_count(llm, role.tensor_parallel_size) > cards:
            errors["llm.pipeline_parallel_size"] = [
                f"tensor {role.tensor_parallel_size} x pipeline {llm.pipeline_parallel_size} "
                f"parallelism needs as many cards; llm.pd.{name}.{kind} is {cards}"
            ]
    return errors


def _scalers(spec: ServiceSpec) -> list[tuple[str, Autoscaler, int, str]]:
    """(where it is given, the autoscaler, instances to start with, where they are given)."""
    starts = spec_facts.replicas(spec)
    return [
        (source, scaler, starts[role], f"llm.pd.{role}.instance" if role else "metadata.instance")
        for role, (source, scaler) in spec_facts.autoscalers(spec).items()
    ]


KUBERNETES = "kubernetes"  # the WHARF_RUNTIME that mounts PersistentVolumeClaims


def runtime_checks(spec: ServiceSpec, runtime: str) -> dict[str, list[str]]:
    """Rules of the runtime the workers run (WHARF_RUNTIME: "kubernetes", "docker", "process",
    or "" for Docker when a daemon answers, else processes): what the spec asks of it that it
    cannot do."""
    errors: dict[str, list[str]] = {}
    for i, container in enumerate(spec.containers):  # with llm, containers[0] is the engine
        if (
            (spec.llm is None or i)
            and runtime == PROCESS
            and not (container.command or container.script)
        ):
            errors[f"containers[{i}].command"] = [
                "this server runs local processes, which have no image entrypoint to run: "
                "give a command or script"
            ]
    if spec.metadata.workload_type is not None and runtime == KUBERNETES:
        errors["metadata.workload_type"] = [
            "a job (elasticjob) runs on Wharf's own nodes (the Docker or process runtime); "
            "this server hands its services to Kubernetes, which Wharf does not render a Job "
            "for yet: deploy it as a service, or on a Docker or process server"
        ]
    for i, entry in enumerate(spec.storage):
        if entry.dataset is not None and runtime == PROCESS:
            errors[f"storage[{i}].dataset"] = [
                f"a dataset is the Docker volume {entry.dataset.volume()!r} (or a Kubernetes "
                "claim of that name): it needs the Docker or Kubernetes runtime, and this "
                "server runs local processes"
            ]
        if entry.pvc is not None and runtime != KUBERNETES:
            errors[f"storage[{i}].pvc"] = [
                "a PersistentVolumeClaim is mounted only on Kubernetes (WHARF_RUNTIME="
                f"kubernetes); this server runs {runtime or 'Docker or local'} instances: "
                "use nfs, oss, obs or s3"
            ]
        if field := _node_only_mount(entry):
            what = NODE_ONLY[field.rsplit(".", 1)[-1]]
            if runtime == KUBERNETES:
                errors[f"storage[{i}].{field}"] = [
                    f"a {what} is made by a Wharf node (the Docker runtime); on "
                    "Kubernetes mount it from a pvc, or stage it into one"
                ]
            elif runtime == PROCESS:
                errors[f"storage[{i}].{field}"] = [
                    f"a {what} is mounted into a container: it needs the Docker "
                    "runtime, and this server runs local processes"
                ]
    return errors


PROCESS = "process"
# Mounts a node makes for a container, and what each is.
NODE_ONLY = {
    "git": "git clone",
    "image": "folder copied out of an image",
    "readOnly": "writable object-storage copy",
}


def _node_only_mount(entry) -> str | None:
    """The entry's source (or its readOnly) when only a node's Docker runtime makes it."""
    if entry.git is not None:
        return "git"
    if entry.image is not None:
        return "image"
    if entry.writable_store() is not None:
        scheme = next(s for s in ("oss", "obs", "s3") if getattr(entry, s) is not None)
        return f"{scheme}.readOnly"
    return None
