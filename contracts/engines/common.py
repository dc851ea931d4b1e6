"""Pieces every engine adapter shares: ports, images, env, flags, mounts, shared memory."""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.engines.models import locate_adapter, locate_model
from contracts.engines.plan import Mount, Placement
from contracts.spec import Container, Llm, OptionValue, ServiceSpec

GIB = 1024**3
# EAS gives multi-card instances 64 GB of /dev/shm by default: tensor-parallel workers and
# NCCL/HCCL exchange activations through it.
SHM_MULTI_CARD = 64 * GIB
# Models come from the node's model store or a mount, never from a hub; and no engine
# phones home.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def first_container(spec: ServiceSpec) -> Container | None:
    return spec.containers[0] if spec.containers else None


def engine_port(spec: ServiceSpec, placement: Placement, default: int) -> int:
    """The placement's port (local processes), else the spec's, else the engine's default."""
    container = first_container(spec)
    return placement.port or (container.port if container and container.port else default)


def engine_image(spec: ServiceSpec, default: str) -> str:
    container = first_container(spec)
    return container.image if container and container.image else default


def user_env(spec: ServiceSpec) -> dict[str, str]:
    container = first_container(spec)
    return {e.name: e.value for e in (container.env if container else [])}


def option_args(options: dict[str, OptionValue]) -> list[str]:
    """`llm.options` as flags: True is a bare flag, False leaves the flag out."""
    args: list[str] = []
    for flag, value in options.items():
        if value is True:
            args.append(flag)
        elif value is not False:
            args += [flag, str(value)]
    return args


def shm_size(cards: int, single_card: int | None) -> int | None:
    return SHM_MULTI_CARD if cards > 1 else single_card


def merge_mounts(*groups: list[Mount]) -> list[Mount]:
    """One mount per target: a draft model may be the main model, or share its store."""
    return list({m.target: m for group in groups for m in group}.values())


@dataclass(frozen=True)
class Models:
    """Where an engine reads its main and draft models and its LoRA adapters, and the mounts
    that put them there."""

    path: str
    draft: str | None
    mounts: list[Mount]
    adapters: dict[str, str] = field(default_factory=dict)  # adapter name -> its path


def locate_models(llm: Llm, placement: Placement) -> Models:
    assert llm.model is not None
    path, mounts = locate_model(llm.model, placement)
    draft, draft_mounts = locate_draft(llm, placement)
    adapters: dict[str, str] = {}
    for adapter in llm.lora.adapters if llm.lora else []:
        adapters[adapter.name], more = locate_adapter(adapter.name, adapter.model, placement)
        mounts = [*mounts, *more]
    return Models(path, draft, merge_mounts(mounts, draft_mounts), adapters)


def locate_draft(llm: Llm, placement: Placement) -> tuple[str | None, list[Mount]]:
    """Where the engine reads the speculative draft model, found like the main model."""
    if llm.speculative is None or llm.speculative.model is None:
        return None, []
    return locate_model(llm.speculative.model, placement)
