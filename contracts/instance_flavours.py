"""The instance types Wharf knows out of the box: what one instance of each has (vCPUs, memory,
cards). Data only; contracts.instance_types reads it, with the operator's own file on top.

ECS GPU types: Alibaba Cloud's "GPU-accelerated compute-optimized instance families" page
(alibabacloud.com/help/en/ecs/user-guide/overview-of-instance-families, the gn8v, gn8is, gn7e,
gn7i, gn7s, gn7, gn6i, gn6e and gn6v tables: vCPUs, memory in GiB, GPUs and GPU memory), read
2026-11-28. Where the page names no GPU model (gn8v, gn7e, gn7) the card is given by its memory.
ModelArts: the CPU flavours Huawei Cloud's ModelArts API reference lists ("CPU: 8vCPUs 32GB"
for modelarts.vm.cpu.8u; modelarts.vm.cpu.2u is 2 vCPUs and 8 GiB); its GPU and Ascend flavours
differ by region and resource pool, so an operator lists those (WHARF_INSTANCE_TYPES_FILE).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Flavour:
    """One instance of an instance type: its vCPUs, memory (GiB) and cards of one kind."""

    cpu: float
    memory_gib: float
    kind: str = ""  # "gpu" | "npu" | "" (no cards)
    cards: int = 0
    card: str = ""  # the card model, for people: placement goes by kind and labels


def _family(card: str, rows: dict[str, tuple[float, float, int]]) -> dict[str, Flavour]:
    return {name: Flavour(cpu, memory, "gpu", cards, card) for name, (cpu, memory, cards) in
            rows.items()}  # fmt: skip


SHIPPED: dict[str, Flavour] = {
    **_family("NVIDIA 96 GB", {
        "ecs.gn8v.4xlarge": (16, 96, 1), "ecs.gn8v.6xlarge": (24, 128, 1),
        "ecs.gn8v-2x.8xlarge": (32, 192, 2), "ecs.gn8v-4x.8xlarge": (32, 384, 4),
        "ecs.gn8v-2x.12xlarge": (48, 256, 2), "ecs.gn8v-8x.16xlarge": (64, 768, 8),
        "ecs.gn8v-4x.24xlarge": (96, 512, 4), "ecs.gn8v-8x.48xlarge": (192, 1024, 8),
    }),
    **_family("NVIDIA L20 48 GB", {
        "ecs.gn8is.2xlarge": (8, 64, 1), "ecs.gn8is.4xlarge": (16, 128, 1),
        "ecs.gn8is-2x.8xlarge": (32, 256, 2), "ecs.gn8is-4x.16xlarge": (64, 512, 4),
        "ecs.gn8is-8x.32xlarge": (128, 1024, 8),
    }),
    **_family("NVIDIA 80 GB", {
        "ecs.gn7e-c16g1.4xlarge": (16, 125, 1), "ecs.gn7e-c16g1.8xlarge": (32, 250, 2),
        "ecs.gn7e-c16g1.16xlarge": (64, 500, 4), "ecs.gn7e-c16g1.32xlarge": (128, 1000, 8),
    }),
    **_family("NVIDIA A10 24 GB", {
        "ecs.gn7i-c8g1.2xlarge": (8, 30, 1), "ecs.gn7i-c16g1.4xlarge": (16, 60, 1),
        "ecs.gn7i-c32g1.8xlarge": (32, 188, 1), "ecs.gn7i-c32g1.16xlarge": (64, 376, 2),
        "ecs.gn7i-c32g1.32xlarge": (128, 752, 4), "ecs.gn7i-c48g1.12xlarge": (48, 310, 1),
        "ecs.gn7i-c56g1.14xlarge": (56, 346, 1), "ecs.gn7i-2x.8xlarge": (32, 128, 2),
        "ecs.gn7i-4x.8xlarge": (32, 128, 4), "ecs.gn7i-4x.16xlarge": (64, 256, 4),
        "ecs.gn7i-8x.32xlarge": (128, 512, 8), "ecs.gn7i-8x.16xlarge": (64, 256, 8),
    }),
    **_family("NVIDIA A30 24 GB", {
        "ecs.gn7s-c8g1.2xlarge": (8, 60, 1), "ecs.gn7s-c16g1.4xlarge": (16, 120, 1),
        "ecs.gn7s-c32g1.8xlarge": (32, 250, 1), "ecs.gn7s-c32g1.16xlarge": (64, 500, 2),
        "ecs.gn7s-c32g1.32xlarge": (128, 1000, 4), "ecs.gn7s-c48g1.12xlarge": (48, 380, 1),
        "ecs.gn7s-c56g1.14xlarge": (56, 440, 1),
    }),
    **_family("NVIDIA 40 GB", {
        "ecs.gn7-c12g1.3xlarge": (12, 94, 1), "ecs.gn7-c13g1.13xlarge": (52, 378, 4),
        "ecs.gn7-c13g1.26xlarge": (104, 756, 8),
    }),
    **_family("NVIDIA T4 16 GB", {
        "ecs.gn6i-c4g1.xlarge": (4, 15, 1), "ecs.gn6i-c8g1.2xlarge": (8, 31, 1),
        "ecs.gn6i-c16g1.4xlarge": (16, 62, 1), "ecs.gn6i-c24g1.6xlarge": (24, 93, 1),
        "ecs.gn6i-c40g1.10xlarge": (40, 155, 1), "ecs.gn6i-c24g1.12xlarge": (48, 186, 2),
        "ecs.gn6i-c24g1.24xlarge": (96, 372, 4),
    }),
    **_family("NVIDIA V100 32 GB", {
        "ecs.gn6e-c12g1.3xlarge": (12, 92, 1), "ecs.gn6e-c12g1.6xlarge": (24, 184, 2),
        "ecs.gn6e-c12g1.12xlarge": (48, 368, 4), "ecs.gn6e-c12g1.24xlarge": (96, 736, 8),
    }),
    **_family("NVIDIA V100 16 GB", {
        "ecs.gn6v-c8g1.2xlarge": (8, 32, 1), "ecs.gn6v-c8g1.4xlarge": (16, 64, 2),
        "ecs.gn6v-c8g1.8xlarge": (32, 128, 4), "ecs.gn6v-c8g1.16xlarge": (64, 256, 8),
        "ecs.gn6v-c10g1.20xlarge": (82, 336, 8),
    }),
    "modelarts.vm.cpu.2u": Flavour(2, 8),
    "modelarts.vm.cpu.8u": Flavour(8, 32),
}  # fmt: skip
