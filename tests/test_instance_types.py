"""EAS instance types sizing a spec (contracts.instance_types): the shipped table, the names that
spell their size, the operator's file on top; only unset fields filled, unknown types warned."""

from __future__ import annotations

import json

import pytest

from contracts.instance_types import (
    SHIPPED,
    Flavour,
    flavour_of,
    operator_table,
    size_by_instance_type,
    table_in_use,
    use_table,
)
from contracts.spec import parse_spec, typed_spec


def spec(computing: dict, **metadata) -> dict:
    return {"name": "s", "cloud": {"computing": computing}, "metadata": {"instance": 1, **metadata},
            "containers": [{"image": "x", "command": "serve", "port": 8000}]}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # Alibaba's GPU family tables, as shipped
        ("ecs.gn7i-c16g1.4xlarge", Flavour(16, 60, "gpu", 1, "NVIDIA A10 24 GB")),
        ("ecs.gn7i-c32g1.32xlarge", Flavour(128, 752, "gpu", 4, "NVIDIA A10 24 GB")),
        ("ecs.gn6i-c8g1.2xlarge", Flavour(8, 31, "gpu", 1, "NVIDIA T4 16 GB")),
        ("ecs.gn6e-c12g1.12xlarge", Flavour(48, 368, "gpu", 4, "NVIDIA V100 32 GB")),
        ("ecs.gn8is-4x.16xlarge", Flavour(64, 512, "gpu", 4, "NVIDIA L20 48 GB")),
        ("ecs.gn8v-8x.48xlarge", Flavour(192, 1024, "gpu", 8, "NVIDIA 96 GB")),
        ("modelarts.vm.cpu.8u", Flavour(8, 32)),
        # ECS's c/g/r names: large 2 vCPUs, xlarge 4, <n>xlarge 4n; 2, 4, 8 GiB per vCPU
        ("ecs.c7a.large", Flavour(2, 4)),
        ("ecs.g8i.xlarge", Flavour(4, 16)),
        ("ecs.c8i.2xlarge", Flavour(8, 16)),
        ("ecs.r7.16xlarge", Flavour(64, 512)),
        # EAS's ml.* specs spell cores, memory and cards
        ("ml.gu7i.c16m60.1-gu30", Flavour(16, 60, "gpu", 1, "GU30")),
        ("ml.gu7i.c32m188.1-gu30", Flavour(32, 188, "gpu", 1, "GU30")),
        # unknown
        ("ecs.gn7-c12g1.12xlarge", None),
        ("ecs.gn5-c8g1.2xlarge", None),
        ("ml.gu8xf.8xlarge-gu108", None),
        ("ecs.c7.2large", None),
        ("", None),
    ],
)  # fmt: skip
def test_what_an_instance_type_gives(name, expected):
    assert flavour_of(name, SHIPPED) == expected


def test_every_shipped_gpu_type_has_cards_and_whole_sizes():
    for name, flavour in SHIPPED.items():
        assert flavour.cpu > 0 and flavour.memory_gib > 0, name
        if name.startswith("ecs.gn"):
            assert flavour.kind == "gpu" and 1 <= flavour.cards <= 8 and flavour.card, name


@pytest.mark.parametrize(
    ("computing", "metadata", "filled", "note"),
    [
        ({"instance_type": "ecs.gn7i-c16g1.4xlarge"}, {},
         {"cpu": 16, "memory": 61440, "gpu": 1},
         "ecs.gn7i-c16g1.4xlarge (16 vCPUs, 60 GiB, 1 × NVIDIA A10 24 GB): filled in "
         "metadata.cpu 16, metadata.memory 61440, metadata.gpu 1"),
        # only what the spec leaves unset
        ({"instance_type": "ecs.gn7i-c16g1.4xlarge"}, {"cpu": 4, "gpu": 2},
         {"cpu": 4, "memory": 61440, "gpu": 2}, "filled in metadata.memory 61440"),
        # cards of either kind given: the type's cards are not added beside them
        ({"instance_type": "ecs.gn6i-c4g1.xlarge"}, {"npu": 1},
         {"cpu": 4, "memory": 15360, "npu": 1}, "filled in metadata.cpu 4, metadata.memory 15360"),
        ({"instance_type": "ecs.gn6i-c4g1.xlarge"}, {"cpu": 2, "memory": 8000, "gpu": 1},
         {"cpu": 2, "memory": 8000, "gpu": 1}, "nothing changed"),
        # the first type known of EAS's ordered list sizes every instance
        ({"instances": [{"type": "ecs.gn9x.unknown"}, {"type": "ecs.c7a.large"},
                        {"type": "ecs.g7.xlarge"}]}, {},
         {"cpu": 2, "memory": 4096}, "ecs.c7a.large (2 vCPUs, 4 GiB): filled in"),
        # instance_type is preferred over instances[]
        ({"instance_type": "ml.gu7i.c16m60.1-gu30", "instances": None}, {},
         {"cpu": 16, "memory": 61440, "gpu": 1}, "1 × GU30"),
    ],
    ids=["all-unset", "some-set", "npu-given", "all-set", "first-known", "ml-spec"],
)  # fmt: skip
def test_a_known_type_fills_only_unset_metadata(computing, metadata, filled, note):
    data, notes, _ = size_by_instance_type(spec(computing, **metadata), SHIPPED)
    assert {k: v for k, v in data["metadata"].items() if k != "instance"} == filled
    assert len(notes) == 1 and note in notes[0]["message"]
    parse_spec(data)  # what it fills is a valid spec


def test_the_note_names_the_field_that_sized_it():
    sent = spec({"instances": [{"type": "nope"}, {"type": "ecs.gn7i-c8g1.2xlarge"}]})
    _, notes, warnings = size_by_instance_type(sent, SHIPPED)
    assert [n["field"] for n in notes] == ["cloud.computing.instances[1].type"]
    assert [w["field"] for w in warnings] == ["cloud.computing.instances[0].type"]


@pytest.mark.parametrize(
    "computing",
    [{"instance_type": "ecs.gn7-c12g1.12xlarge"},
     {"instances": [{"type": "ecs.hfc7.xlarge"}, {"type": "ecs.gn5-c4g1.xlarge"}]}],
)  # fmt: skip
def test_an_unknown_type_is_a_warning_naming_it_never_an_error(computing):
    sent = spec(computing)
    data, notes, warnings = size_by_instance_type(sent, SHIPPED)
    assert data == sent and notes == []
    names = [e["type"] for e in computing.get("instances", [])] or [computing["instance_type"]]
    assert len(warnings) == len(names)
    for warning, name in zip(warnings, names, strict=True):
        assert warning["field"].startswith("cloud.computing.")
        assert (
            repr(name) in warning["message"] and "WHARF_INSTANCE_TYPES_FILE" in warning["message"]
        )


@pytest.mark.parametrize(
    "data",
    [{"name": "s"}, {"name": "s", "cloud": {"networking": {}}}, {"name": "s", "cloud": "x"},
     {"name": "s", "cloud": {"computing": {"instances": [{"type": "dedicated_resource"}, 3]}}},
     {"name": "s", "metadata": "x", "cloud": {"computing": {"instance_type": "ecs.g7.large"}}},
     [1, 2], "text"],
)  # fmt: skip
def test_a_spec_without_a_usable_type_is_returned_as_is(data):
    assert size_by_instance_type(data, SHIPPED) == (data, [], [])


def test_the_operators_file_adds_types_and_overrides_shipped_ones():
    table = operator_table(json.loads("""{
        "ascend-snt9b-1card": {"cpu": 24, "memory_gib": 192, "npu": 1,
                                    "card": "Ascend snt9b 64 GB"},
        "ecs.gn7i-c16g1.4xlarge": {"cpu": 14, "memory_gib": 56, "gpu": 1}
    }"""))  # fmt: skip
    assert table["ascend-snt9b-1card"] == Flavour(24, 192, "npu", 1, "Ascend snt9b 64 GB")
    assert table["ecs.gn7i-c16g1.4xlarge"] == Flavour(14, 56, "gpu", 1)
    assert table["ecs.gn6i-c4g1.xlarge"] == SHIPPED["ecs.gn6i-c4g1.xlarge"]
    data, _, _ = size_by_instance_type(spec({"instance_type": "ascend-snt9b-1card"}), table)
    assert data["metadata"] == {"instance": 1, "cpu": 24, "memory": 196608, "npu": 1}


@pytest.mark.parametrize(
    ("entries", "named"),
    [
        ([], "JSON object"),
        ({"t": {"cpu": 2}}, "t: memory_gib"),
        ({"t": {"cpu": "2", "memory_gib": 4}}, "t: cpu"),
        ({"t": {"cpu": 2, "memory_gib": 4, "gpu": 1, "npu": 1}}, "t: give gpu or npu"),
        ({"t": {"cpu": 2, "memory_gib": 4, "gpu": 1.5}}, "t: gpu must be a positive whole"),
        ({"t": {"cpu": 2, "memory_gib": 4, "gpus": 1}}, "t: unknown keys gpus"),
        ({"t": {"cpu": True, "memory_gib": 4}}, "t: cpu"),
        ({"t": [2, 4]}, "t: give an object"),
        ({"t": {"cpu": 2, "memory_gib": 4, "card": 7}}, "t: card"),
    ],
)  # fmt: skip
def test_a_wrong_operator_entry_is_refused_naming_it(entries, named):
    with pytest.raises(ValueError, match=named):
        operator_table(entries)


def test_every_spec_read_is_sized_by_the_table_in_use():
    sent = spec({"instance_type": "ascend-snt9b-1card"})
    assert typed_spec(sent).metadata.npu == 0  # not a shipped type
    before = table_in_use()
    use_table(operator_table({"ascend-snt9b-1card": {"cpu": 24, "memory_gib": 192,
                                                          "npu": 1}}))  # fmt: skip
    try:
        metadata = typed_spec(sent).metadata
        assert (metadata.cpu, metadata.memory, metadata.npu) == (24, 196608, 1)
        assert "cpu" not in sent["metadata"]  # the sent spec is left as it was
    finally:
        use_table(before)
