"""A user's own image and command, run as given (EAS's custom deployment)."""

from __future__ import annotations

from contracts.engines.models import locate_model
from contracts.engines.plan import ContainerPlan, Placement
from contracts.engines.vllm_ascend import driver_mounts, npu_devices
from contracts.spec import ServiceSpec

DEFAULT_PORT = 8000


def render(spec: ServiceSpec, placement: Placement) -> ContainerPlan:
    container = spec.containers[0]
    shell = container.command or container.script
    port = container.port or DEFAULT_PORT
    env = {e.name: e.value for e in container.env}
    # The command is a shell line in EAS's format; PORT tells a process-runtime instance which
    # port it was given when the spec's own port cannot be used.
    env.setdefault("PORT", str(placement.port or port))
    # The command still needs the cards the instance was given (EAS runs BladeLLM this way).
    npu = spec.metadata.npu > 0 and placement.in_container
    mounts = driver_mounts(placement) if npu else []
    if spec.llm and spec.llm.model:
        # A command edited from the engine's preview (the console's "edit freely") still reads
        # the model where the preview put it.
        mounts += locate_model(spec.llm.model, placement)[1]
    return ContainerPlan(
        image=container.image or "",
        args=["/bin/sh", "-c", shell] if shell else [],  # none: the image's entrypoint runs
        port=placement.port or port,
        env=env,
        mounts=mounts,
        health_path="",  # unknown for a custom server: a TCP check
        metrics_path=None,
        gpus=placement.devices if spec.metadata.gpu else (),
        device_paths=npu_devices(placement) if npu else (),
    )


def validate(spec: ServiceSpec) -> dict[str, list[str]]:
    if spec.llm and spec.llm.speculative:
        return {"llm.speculative": [
            "a given command runs verbatim; put the draft model in the command, or drop the "
            "command to let the engine adapter map llm.speculative"
        ]}  # fmt: skip
    return {}
