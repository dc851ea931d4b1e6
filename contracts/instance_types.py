"""EAS's instance types made into what an instance gets here: `cloud.computing.instance_type`
and `cloud.computing.instances[].type` (and ModelArts flavours given there) fill
`metadata.cpu`, `memory` and `gpu`|`npu` where the spec leaves them unset. Pure: the caller
passes the table (contracts.instance_flavours.SHIPPED with the operator's file on top,
`operator_table`) and gets the spec back with what was filled said in notes, and each type
it does not know named in a warning, never an error.

The stored spec keeps what the user sent (and `?format=eas` gives it back): the sizing is
applied whenever a spec is read (contracts.spec.typed_spec calls `sized`, with the table the
process was configured with, `use_table`), so the API's checks and quotas, the workers'
placement and the spec hash all see the same filled metadata. Every process reads the same
WHARF_INSTANCE_TYPES_FILE (controlplane.settings), or the hashes of specs it sizes differ.

A type is found in the table first, then by the names that say their size themselves:
- ECS's enterprise families c, g and r (`ecs.c7a.large`, `ecs.g8i.2xlarge`): `large` is 2 vCPUs,
  `xlarge` 4 and `<n>xlarge` 4n, with 2, 4 and 8 GiB per vCPU (Alibaba Cloud's "Instance
  family" naming: alibabacloud.com/help/en/ecs/user-guide/instance-specification-naming-and-
  classification, and the c/g/r families' 1:2, 1:4, 1:8 vCPU-to-memory ratios);
- EAS's `ml.*` specs that spell cores, memory and cards (`ml.gu7i.c16m60.1-gu30`: 16 vCPUs,
  60 GiB, 1 GU30 GPU), as EAS's DescribeMachineSpec lists them (`ml.gu7i.c32m188.1-gu30`:
  Memory 188, GPU 1 of 24 GB).

EAS tries `instances[]` in order when one type is out of stock; here the first type known
sizes every instance. The card model in a note is for people: Wharf places an instance by
card kind (gpu, npu) and node labels (workers.scheduling.placement), never by model, so a spec that
needs a given model names it with metadata.resource or the nodes' labels.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from contracts.instance_flavours import SHIPPED, Flavour

__all__ = [
    "SHIPPED", "Flavour", "operator_table", "flavour_of", "size_by_instance_type", "sized",
    "use_table", "table_in_use",
]  # fmt: skip

ECS_SIZED = re.compile(r"^ecs\.([cgr])\d+[a-z]*\.(?:(\d*)x)?large$")
GIB_PER_VCPU = {"c": 2, "g": 4, "r": 8}
ML_SPELLED = re.compile(r"^ml\.[a-z0-9]+\.c(\d+)m(\d+)\.(\d+)-(gu\d+)$")
# instances[].type values that name no machine: EAS's dedicated resource group in a mix.
NOT_A_TYPE = frozenset({"dedicated_resource"})
MAX_NAME = 128
KINDS = ("gpu", "npu")


_in_use: Mapping[str, Flavour] = SHIPPED


def use_table(table: Mapping[str, Flavour]) -> None:
    """Size every spec this process reads with `table` (set once, at start-up)."""
    global _in_use
    _in_use = table


def table_in_use() -> Mapping[str, Flavour]:
    return _in_use


def sized(data: Any) -> Any:
    """`data` with its instance type's metadata filled in, by the table in use."""
    return size_by_instance_type(data, _in_use)[0]


def flavour_of(name: str, table: Mapping[str, Flavour]) -> Flavour | None:
    """What one instance of type `name` has, or None for a type Wharf does not know."""
    if name in table:
        return table[name]
    if match := ECS_SIZED.fullmatch(name):
        family, count = match.groups()  # count: None for large, "" for xlarge
        vcpus = 2 if count is None else 4 * int(count or 1)
        return Flavour(vcpus, vcpus * GIB_PER_VCPU[family])
    if match := ML_SPELLED.fullmatch(name):
        cores, memory, cards, card = match.groups()
        return Flavour(int(cores), int(memory), "gpu", int(cards), card.upper())
    return None


def _types(data: dict) -> list[tuple[str, str]]:
    """(field, type) of each instance type the spec names, in EAS's order of preference."""
    cloud = data.get("cloud")
    computing = cloud.get("computing") if isinstance(cloud, dict) else None
    if not isinstance(computing, dict):
        return []
    found = []
    if isinstance(computing.get("instance_type"), str):
        found.append(("cloud.computing.instance_type", computing["instance_type"]))
    instances = computing.get("instances")
    for i, entry in enumerate(instances if isinstance(instances, list) else []):
        kind = entry.get("type") if isinstance(entry, dict) else None
        if isinstance(kind, str) and kind not in NOT_A_TYPE:
            found.append((f"cloud.computing.instances[{i}].type", kind))
    return found


def _unset(metadata: dict, key: str) -> bool:
    return metadata.get(key) is None


def _filled(flavour: Flavour, metadata: dict) -> dict[str, float | int]:
    """The metadata fields `flavour` gives that `metadata` leaves unset."""
    given: dict[str, float | int] = {
        "cpu": int(flavour.cpu) if float(flavour.cpu).is_integer() else flavour.cpu,
        "memory": round(flavour.memory_gib * 1024),  # metadata.memory is in MB
    }
    if flavour.cards and all(_unset(metadata, kind) for kind in KINDS):
        given[flavour.kind] = flavour.cards
    return {key: value for key, value in given.items() if _unset(metadata, key)}


def _describe(name: str, flavour: Flavour) -> str:
    cards = f", {flavour.cards} × {flavour.card or flavour.kind.upper()}" if flavour.cards else ""
    return f"{name} ({flavour.cpu:g} vCPUs, {flavour.memory_gib:g} GiB{cards})"


def size_by_instance_type(
    data: Any, table: Mapping[str, Flavour]
) -> tuple[Any, list[dict[str, str]], list[dict[str, str]]]:
    """`data` (a canonical spec) with metadata.cpu, memory and gpu|npu filled from its
    instance type where unset; notes saying what was filled, warnings naming each type not
    known. Anything that is not a spec object is returned as is, with neither."""
    metadata = data.get("metadata", {}) if isinstance(data, dict) else None
    if not isinstance(metadata, dict):  # for the schema to refuse, unchanged
        return data, [], []
    notes: list[dict[str, str]] = []
    warnings: list[dict[str, str]] = []
    chosen = None
    for field, name in _types(data):
        flavour = flavour_of(name, table)
        if flavour is None:
            warnings.append({"field": field, "message": (
                f"unknown instance type {name[:MAX_NAME]!r}: it sizes nothing here; set "
                "metadata.cpu, memory and gpu (or npu), or ask the operator to list it in "
                "WHARF_INSTANCE_TYPES_FILE"
            )})  # fmt: skip
        elif chosen is None:
            chosen = (field, name, flavour)
    if chosen is None:
        return data, notes, warnings
    field, name, flavour = chosen
    filled = _filled(flavour, metadata)
    said = ", ".join(f"metadata.{key} {value}" for key, value in filled.items())
    notes.append({"field": field, "message": (
        f"{_describe(name, flavour)}: filled in {said}" if filled else
        f"{_describe(name, flavour)}: metadata already gives what it would fill; nothing changed"
    )})  # fmt: skip
    return ({**data, "metadata": {**metadata, **filled}} if filled else data), notes, warnings


def operator_table(entries: Any) -> dict[str, Flavour]:
    """An operator's instance types (the JSON object of WHARF_INSTANCE_TYPES_FILE) over the
    shipped ones: `{"<type>": {"cpu": 24, "memory_gib": 192, "npu": 1, "card": "..."}}`, each
    with cpu and memory_gib, at most one of gpu and npu. ValueError naming the bad entry."""
    if not isinstance(entries, dict):
        raise ValueError("give a JSON object of instance type -> {cpu, memory_gib, gpu|npu}")
    table = dict(SHIPPED)
    for name, entry in entries.items():
        table[name] = _operator_flavour(name, entry)
    return table


def _number(entry: dict, key: str, name: str, *, whole: bool = False) -> Any:
    value = entry.get(key)
    kinds = int if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        raise ValueError(f"{name}: {key} must be a positive {'whole ' if whole else ''}number")
    return value


def _operator_flavour(name: str, entry: Any) -> Flavour:
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        raise ValueError(f"{name!r}: an instance type is a name of 1 to {MAX_NAME} characters")
    if not isinstance(entry, dict):
        raise ValueError(f"{name}: give an object with cpu and memory_gib")
    unknown = set(entry) - {"cpu", "memory_gib", "card", *KINDS}
    if unknown:
        raise ValueError(f"{name}: unknown keys {', '.join(sorted(unknown))}")
    kinds = [kind for kind in KINDS if kind in entry]
    if len(kinds) > 1:
        raise ValueError(f"{name}: give gpu or npu, not both")
    card = entry.get("card", "")
    if not isinstance(card, str):
        raise ValueError(f"{name}: card is the card model's name, a string")
    cpu, memory = _number(entry, "cpu", name), _number(entry, "memory_gib", name)
    if not kinds:
        return Flavour(cpu, memory, card=card)
    return Flavour(cpu, memory, kinds[0], _number(entry, kinds[0], name, whole=True), card)
