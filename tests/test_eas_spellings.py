"""EAS's spellings of one setting, made Wharf's one (contracts.eas), as a table: every place EAS
takes a setting, the numbers and booleans it takes as strings, and a setting given twice."""

from __future__ import annotations

import pytest

from contracts.eas import normalise
from contracts.spec import SpecError, parse_spec
from contracts.spec_cloud import cloud_only_warnings

SCALER = {"min": 1, "max": 3, "scaleStrategies": [{"metricName": "qps", "threshold": 10}]}
IMAGE = {"image": "registry.example/team/app:1", "command": "serve", "port": 8000}


def doc(**parts) -> dict:
    return {"containers": [dict(IMAGE)], **parts}


# (case, as an EAS user writes it, Wharf's canonical form of the part that differs)
SPELLINGS = [
    ("name at the top", doc(name="svc"), {"name": "svc"}),
    ("metadata.name", doc(metadata={"name": "svc"}), {"name": "svc"}),
    ("both names alike", doc(name="svc", metadata={"name": "svc"}), {"name": "svc"}),
    (
        "flat rpc key in metadata",
        doc(name="svc", metadata={"rpc.keepalive": 3000}),
        {"metadata": {"rpc": {"keepalive": 3000}}},
    ),
    (
        "nested rpc",
        doc(name="svc", metadata={"rpc": {"keepalive": 3000, "max_queue_size": 8}}),
        {"metadata": {"rpc": {"keepalive": 3000, "max_queue_size": 8}}},
    ),
    (
        "rpc at the top",
        {**doc(name="svc"), "rpc": {"keepalive": 3000}},
        {"metadata": {"rpc": {"keepalive": 3000}}},
    ),
    (
        "flat rpc at the top",
        {**doc(name="svc"), "rpc.keepalive": 3000},
        {"metadata": {"rpc": {"keepalive": 3000}}},
    ),
    (
        "flat and nested rpc merged",
        doc(name="svc", metadata={"rpc.keepalive": 3000, "rpc": {"rate_limit": 5}}),
        {"metadata": {"rpc": {"keepalive": 3000, "rate_limit": 5}}},
    ),
    (
        "metadata.max_queue_size",
        doc(name="svc", metadata={"max_queue_size": 64}),
        {"metadata": {"rpc": {"max_queue_size": 64}}},
    ),
    (
        "flat eas.termination_grace_period",
        doc(name="svc", metadata={"eas.termination_grace_period": 45}),
        {"metadata": {"termination_grace_period": 45}},
    ),
    (
        "eas block at the top",
        {**doc(name="svc"), "eas": {"termination_grace_period": 45}},
        {"metadata": {"termination_grace_period": 45}},
    ),
    (
        "runtime.termination_grace_period",
        {**doc(name="svc"), "runtime": {"termination_grace_period": 45}},
        {"metadata": {"termination_grace_period": 45}},
    ),
    (
        "metadata.autoscaler",
        doc(name="svc", metadata={"autoscaler": SCALER}),
        {"autoscaler": SCALER},
    ),
    (
        "credential.docker_auth",
        {**doc(name="svc"), "credential": {"docker_auth": "dTpw"}},
        {"dockerAuth": "dTpw"},
    ),
    (
        "resource at the top",
        {**doc(name="svc"), "resource": "eas-r-1"},
        {"metadata": {"resource": "eas-r-1"}},
    ),
    (
        "instance as a string",
        doc(name="svc", metadata={"instance": "2"}),
        {"metadata": {"instance": 2}},
    ),
    ("cpu as a string", doc(name="svc", metadata={"cpu": "1.5"}), {"metadata": {"cpu": 1.5}}),
    (
        "port as a string",
        {"name": "svc", "containers": [{**IMAGE, "port": "8000"}]},
        {"containers": [IMAGE]},
    ),
    (
        "boolean as a string",
        doc(
            name="svc",
            storage=[
                {"mount_path": "/d", "nfs": {"server": "nas", "path": "/x", "readOnly": "true"}}
            ],
        ),
        {
            "storage": [
                {"mount_path": "/d", "nfs": {"server": "nas", "path": "/x", "readOnly": True}}
            ]
        },
    ),  # fmt: skip
]


def subset(part, whole) -> bool:
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(
            k in whole and subset(v, whole[k]) for k, v in part.items()
        )
    return part == whole


@pytest.mark.parametrize(
    ("given", "expected"), [c[1:] for c in SPELLINGS], ids=[c[0] for c in SPELLINGS]
)
def test_each_spelling_is_made_wharfs_one(given, expected):
    before = repr(given)
    found = normalise(given)
    assert subset(expected, found), found
    assert repr(given) == before  # the caller's document is left as sent
    parse_spec(found)  # and the strict schema takes it


@pytest.mark.parametrize(
    ("given", "field"),
    [
        (doc(name="a", metadata={"name": "b"}), "name"),
        (doc(name="svc", metadata={"rpc.keepalive": 1, "rpc": {"keepalive": 2}}),
         "metadata.rpc.keepalive"),
        ({**doc(name="svc"), "eas.termination_grace_period": 5,
          "metadata": {"termination_grace_period": 6}}, "metadata.termination_grace_period"),
        (doc(name="svc", metadata={"rpc": 5, "rpc.keepalive": 1}), "metadata.rpc"),
    ],
)  # fmt: skip
def test_one_setting_given_twice_differently_names_it(given, field):
    with pytest.raises(SpecError) as raised:
        normalise(given)
    assert field in raised.value.errors, raised.value.errors


@pytest.mark.parametrize(
    ("given", "field"),
    [
        (doc(name="svc", metadata={"instance": "two"}), "metadata.instance"),
        (doc(name="svc", metadata={"instance": "2.5"}), "metadata.instance"),
        (doc(name="svc", metadata={"instance": "1e3"}), "metadata.instance"),
        (doc(name="svc", metadata={"rpc.nosuch": 1}), "metadata.rpc.nosuch"),
        (doc(name="svc", metadata={"typo": 1}), "metadata.typo"),
        ({**doc(name="svc"), "credential": {"docker_auth": "dTpw", "other": 1}}, "credential"),
    ],
)
def test_what_is_no_spelling_of_anything_is_still_refused_by_name(given, field):
    with pytest.raises(SpecError) as raised:
        parse_spec(normalise(given))
    assert field in raised.value.errors, raised.value.errors


def test_a_string_where_the_schema_takes_strings_stays_a_string():
    """llm.options take strings, numbers and booleans: "true" there is the user's string."""
    found = normalise({"name": "svc", "llm": {"engine": "vllm-cpu", "model": "m",
                                              "options": {"--x": "true", "--n": "2"}}})  # fmt: skip
    assert found["llm"]["options"] == {"--x": "true", "--n": "2"}


def test_what_shapes_no_instance_leaves_the_spec_hash_alone():
    """Cloud-only fields, labels, the token and a mount's console properties roll no
    instance when added or changed (and left the hashes of earlier specs as they were); an
    instance type does, by the metadata it fills (contracts.instance_types)."""
    plain = {"name": "svc", "containers": [dict(IMAGE)],
             "storage": [{"mount_path": "/d", "nfs": {"server": "nas", "path": "/x"}}]}  # fmt: skip
    more = {
        **plain,
        "cloud": {
            "networking": {"vpc_id": "vpc-1"},
            "computing": {"disable_spot_protection_period": True},
        },
        "features": {"eas.aliyun.com/extra-ephemeral-storage": "100Gi"},
        "labels": {"team": "a"},
        "token": "t" * 16,
        "networking": {"gateway": "gw-1"},
        "metadata": {
            "workspace_id": "1",
            "region": "cn-hangzhou",
            "cuda": "11.2",
            "rpc.batching": "true",
            "rpc.io_threads": 8,
        },
        "storage": [{**plain["storage"][0], "properties": {"resource_type": "model"}}],
    }
    assert parse_spec(normalise(more)).spec_hash() == parse_spec(plain).spec_hash()
    sized = {**more, "cloud": {"computing": {"instance_type": "ecs.gn7i-c16g1.4xlarge"}}}
    assert parse_spec(normalise(sized)).spec_hash() != parse_spec(plain).spec_hash()
    warned = {w["field"] for w in cloud_only_warnings(normalise(more))}
    assert warned == {"cloud", "features", "networking.gateway", "metadata.workspace_id",
                      "metadata.region", "metadata.cuda", "storage[0].properties",
                      "metadata.rpc.batching", "metadata.rpc.io_threads"}  # fmt: skip
