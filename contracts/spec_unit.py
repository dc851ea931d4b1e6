"""Instances across hosts: EAS's `unit` block (`unit.size`, machines per instance) and the
parallelism that spreads one copy of a model over them (`llm.pipeline_parallel_size` beside
`llm.tensor_parallel_size`, and `llm.enable_expert_parallel` for mixture-of-experts models).
Pure.

An instance of `unit.size` N > 1 is a gang of N members, one per node: every member holds the
spec's cards per machine (metadata.gpu / npu, per machine as in EAS; in a prefill/decode
service each role's own), and together they hold tensor x pipeline parallel cards. Member 0,
the leader, serves HTTP; the others only compute (contracts.engines.gang renders each one's
command, workers.scheduling.gang places them together or not at all). In a prefill/decode service
`unit.size` applies to both roles: each prefill and each decode instance spans N hosts.

`unit.enable_c4d` and `unit.enable_rebuild` are EAS's Lingjun features (contracts.spec_cloud
warns that they do nothing here). A spec without `unit`, or with size 1, hashes as before.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from contracts.spec_fleet import _Strict

MAX_UNIT_SIZE = 64  # machines per instance
# Engines that start one model across hosts: vLLM's own multi-node launch (its CPU build
# too, over gloo), SGLang's, and vLLM-Ascend's (vLLM's, with HCCL between NPU hosts).
MULTI_HOST_ENGINES = ("vllm", "vllm-cpu", "sglang", "vllm-ascend")
# Engines whose expert parallelism Wharf renders (vLLM's switch; SGLang sizes its own with
# --ep-size, which llm.options passes).
EXPERT_PARALLEL_ENGINES = ("vllm", "vllm-ascend")
# Cloud-only fields of the unit block, each with why it has no effect (contracts.spec_cloud).
UNIT_CLOUD = {
    "enable_c4d": "C4D is EAS's fault detection for Lingjun clusters (Alibaba Cloud's); "
    "Wharf's own health checks watch the instance",
    "enable_rebuild": "EAS rebuilds a Lingjun unit on spare machines of its own pool; Wharf "
    "places an instance on its own nodes",
}


class Unit(_Strict):
    """EAS's `unit`: how many machines one instance spans."""

    size: int = Field(
        default=1, ge=1, le=MAX_UNIT_SIZE,
        description="Machines (nodes) per instance; each holds metadata.gpu / npu cards, and "
        "together they hold llm.tensor_parallel_size x llm.pipeline_parallel_size. Member 0 "
        "serves; every member is placed and restarted with the others.",
    )  # fmt: skip
    enable_c4d: bool | None = Field(default=None, description=UNIT_CLOUD["enable_c4d"])
    enable_rebuild: bool | None = Field(default=None, description=UNIT_CLOUD["enable_rebuild"])


class Unitized(_Strict):
    """The service spec's `unit` block."""

    unit: Unit | None = Field(
        default=None, description="EAS's distributed inference: machines per instance."
    )

    def unit_size(self) -> int:
        """Machines (gang members) per instance: 1 unless unit.size says more."""
        return self.unit.size if self.unit else 1


class LlmParallelism(_Strict):
    """The parallelism of llm beyond tensor parallelism (mixed into contracts.spec.Llm)."""

    pipeline_parallel_size: int = Field(
        default=1, ge=1, le=MAX_UNIT_SIZE,
        description="Pipeline stages one copy of the model is split into (usually one per "
        "machine of unit.size); cards per instance are tensor x pipeline parallel size.",
    )  # fmt: skip
    enable_expert_parallel: bool | None = Field(
        default=None,
        description="A mixture-of-experts model's experts spread over the cards rather than "
        "each expert split across them (vLLM's --enable-expert-parallel); none: the engine's "
        "default (off).",
    )


def drop_unset_unit(data: dict[str, Any]) -> None:
    """The hash's view (contracts.spec.ServiceSpec.spec_hash): no unit, or one of size 1,
    pipeline parallelism 1 and expert parallelism unset or off leave earlier hashes as they
    were; the cloud-only fields shape nothing."""
    unit = data.get("unit")
    if unit is not None:
        for key in UNIT_CLOUD:
            unit.pop(key, None)
    if unit is None or unit == {"size": 1}:
        data.pop("unit", None)
    llm = data.get("llm")
    if llm and llm.get("pipeline_parallel_size") == 1:
        del llm["pipeline_parallel_size"]
    if llm and not llm.get("enable_expert_parallel", True):  # unset or off: no flag either way
        del llm["enable_expert_parallel"]
