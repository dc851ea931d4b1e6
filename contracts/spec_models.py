"""The spec's models beyond the main one: where a model comes from (`model_reference`, shared by
`llm.model`, the draft model and adapters), speculative decoding's draft (`llm.speculative`)
and LoRA adapters (`llm.lora`). `spec.py` re-exports them.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Literal

from pydantic import Field, field_validator, model_validator

from contracts.hub_refs import HUB_SCHEMES, parse_hub_ref
from contracts.spec_fleet import _Strict

# A model in the node's model store: `tiny-llama` or `org/model`; never `..`.
MODEL_STORE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
OBJECT_STORAGE_SCHEMES = ("oss", "obs", "s3")
OBJECT_URI = re.compile(r"^(oss|obs|s3)://[a-z0-9][a-z0-9.-]{1,62}(/.*)?$")
# An adapter's name: what callers add after "<model>:"; no ':' of its own.
ADAPTER_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MAX_ADAPTERS = 256
MAX_LORA_RANK = 512
DEFAULT_LORA = (1, 16)  # vLLM's max_loras and max_lora_rank when not given
# Engines that load and unload adapters while they run (vLLM's runtime LoRA endpoints): a
# changed adapter list is applied to their running instances, not rolled out.
RUNTIME_LORA_ENGINES = ("vllm", "vllm-cpu", "vllm-ascend")


def model_reference(value: str) -> str:
    """A model in the node's model store, an absolute path in the container, an
    object-storage URI or a hub reference (hf://, modelscope://) that the worker stages into
    the node's cache."""
    if value.startswith("/"):
        if ".." in value.split("/"):
            raise ValueError("a model path must not contain '..'")
        return value
    scheme, sep, _ = value.partition("://")
    if sep and scheme in HUB_SCHEMES:
        parse_hub_ref(value)  # its ValueError says what is wrong
        return value
    if sep:
        if scheme not in OBJECT_STORAGE_SCHEMES:
            raise ValueError(
                f"unknown scheme {scheme!r}; use oss://, obs://, s3://, hf:// or modelscope://"
            )
        if not OBJECT_URI.fullmatch(value):
            raise ValueError(f"an object-storage model looks like {scheme}://bucket/prefix/")
        return value
    if not MODEL_STORE_NAME.fullmatch(value) or ".." in value:
        raise ValueError(
            "give a model in the node's model store (e.g. 'tiny-llama'), an absolute path "
            "inside the container, an oss://, obs:// or s3:// URI, or a hub reference "
            "(hf://org/name[@revision], modelscope://org/name[@revision])"
        )
    return value


class Speculative(_Strict):
    """Speculative decoding: a draft model (or method) proposes tokens the main model checks."""

    model: str | None = None  # the draft model; not needed by ngram/mtp-style methods
    num_speculative_tokens: int = Field(default=4, ge=1, le=32)
    method: Literal["draft_model", "ngram", "eagle", "eagle3", "medusa", "mtp"] = "draft_model"

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        return None if value is None else model_reference(value)

    @model_validator(mode="after")
    def _draft_needed(self) -> Speculative:
        if self.method in ("draft_model", "eagle", "eagle3", "medusa") and not self.model:
            raise ValueError(f"method {self.method} needs a draft model in speculative.model")
        return self


class Adapter(_Strict):
    """A LoRA adapter of the base model, which callers name `<model>:<name>`."""

    name: str = Field(
        json_schema_extra={"pattern": ADAPTER_NAME},
        description="Up to 64 letters, digits, '_', '.' or '-'; callers ask for "
        "'<service or served name>:<name>'.",
    )
    model: str = Field(
        description="Where the adapter's weights are, as llm.model takes them: a model-store "
        "name, an absolute path in the container, an oss://, obs:// or s3:// URI, or "
        "hf://org/name[@revision] / modelscope://org/name[@revision].",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(ADAPTER_NAME, value):
            raise ValueError(
                "an adapter name starts with a letter or digit and has up to 64 letters, "
                "digits, '_', '.' or '-' (no ':', which separates it from the model's name)"
            )
        return value

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        return model_reference(value)


class Lora(_Strict):
    """LoRA adapters served by the same engines as the base model, each its own model name."""

    adapters: list[Adapter] = Field(default=[], max_length=MAX_ADAPTERS)
    max_loras: int | None = Field(
        default=None, ge=1, le=MAX_ADAPTERS,
        description="Adapters one batch may use at once (each holds a slot of the cards' "
        "memory); none: the engine's default (1 on vLLM).",
    )  # fmt: skip
    max_rank: int | None = Field(
        default=None, ge=1, le=MAX_LORA_RANK,
        description="The largest rank of the adapters; none: the engine's default (16 on vLLM).",
    )  # fmt: skip

    @field_validator("adapters")
    @classmethod
    def _unique(cls, value: list[Adapter]) -> list[Adapter]:
        counts = Counter(a.name for a in value)
        twice = sorted(name for name, n in counts.items() if n > 1)
        if twice:
            raise ValueError(f"adapter names must be unique; {', '.join(twice)} given twice")
        return value

    @property
    def slots(self) -> tuple[int, int]:
        """(max_loras, max_rank) as the engine runs them: its defaults for those not given."""
        return self.max_loras or DEFAULT_LORA[0], self.max_rank or DEFAULT_LORA[1]
