"""The operator's grants (contracts.grants) as a table: what a workspace's spec may ask of
shared ground with no grant, and with the grant that opens each capability."""

from __future__ import annotations

import pytest

from contracts.grants import GrantsError, parse_grants, refusals
from contracts.spec import parse_spec

BASE = {"name": "svc", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}
PD = {"prefill": {"instance": 1, "gpu": 1}, "decode": {"instance": 1, "gpu": 1}}


def spec(**parts):
    data = {**BASE, **parts}
    data["llm"] = {**BASE["llm"], **parts.get("llm", {})}
    return parse_spec(data)


def nfs(server: str, path: str) -> dict:
    return {"storage": [{"mount_path": "/data", "nfs": {"server": server, "path": path}}]}


def s3(path: str, **more) -> dict:
    return {"storage": [{"mount_path": "/data", "s3": {"path": path, **more}}]}


def dataset(id: str, **more) -> dict:
    return {"storage": [{"mount_path": "/data", "dataset": {"id": id, **more}}]}


KEYS = {"access_key_id": "id", "access_key_secret": "secret"}
NIXL = {"llm": {"engine": "vllm", "pd": {**PD, "kv_connector": "NixlConnector"}}}

# (case, spec parts, runtime, grants, the refused fields with no grants (None: as with grants))
CASES = [
    ("plain engine", {}, "process", {}, []),
    ("nfs", nfs("nas", "/exports/a"), "docker", {"nfs": ["nas:/exports/a"]}, ["storage[0].nfs"]),
    (
        "nfs beneath",
        nfs("nas", "/exports/a/m"),
        "docker",
        {"nfs": ["nas:/exports/a"]},
        ["storage[0].nfs"],
    ),
    (
        "pvc",
        {"storage": [{"mount_path": "/d", "pvc": {"claim_name": "models"}}]},
        "kubernetes",
        {"pvc": [{"claim": "models"}]},
        ["storage[0].pvc.claim_name"],
    ),
    (
        "dataset",
        dataset("d-1a2b"),
        "docker",
        {"datasets": [{"id": "d-*"}]},
        ["storage[0].dataset.id"],
    ),
    (
        "dataset rw",
        dataset("d-1a2b", read_only=False),
        "docker",
        {"datasets": [{"id": "d-1a2b", "read_write": True}]},
        ["storage[0].dataset.id"],
    ),
    (
        "pvc rw",
        {"storage": [{"mount_path": "/d", "pvc": {"claim_name": "kv", "read_only": False}}]},
        "kubernetes",
        {"pvc": [{"claim": "kv", "read_write": True}]},
        ["storage[0].pvc.claim_name"],
    ),
    (
        "endpoint",
        s3("s3://bk/p/", endpoint="http://10.0.0.5:9000", **KEYS),
        "docker",
        {"storage_endpoints": ["http://10.0.0.5:9000"]},
        ["storage[0].s3.endpoint"],
    ),
    (
        "platform keys",
        s3("s3://team-a/models/"),
        "docker",
        {"platform_buckets": ["s3://team-a"]},
        ["storage[0].s3.access_key_id"],
    ),
    ("own keys", s3("s3://anyone/x/", **KEYS), "docker", {}, []),
    (
        "model uri",
        {"llm": {"model": "oss://team-a/llama/"}},
        "docker",
        {"platform_buckets": ["oss://team-a/*"]},
        ["llm.model"],
    ),
    (
        "resource group",
        {"metadata": {"resource": "h200"}},
        "docker",
        {"resource_groups": ["h200"]},
        ["metadata.resource"],
    ),
    ("nixl, platform image", NIXL, "docker", {}, []),
    (
        "nixl, own image",
        {**NIXL, "containers": [{"image": "attacker/any:1"}]},
        "docker",
        {"host_network": True},
        ["containers[0].image"],
    ),
    (
        "example connector, own image",
        {"llm": {"pd": PD}, "containers": [{"image": "me/x:1"}]},
        "docker",
        {},
        [],
    ),
    (
        "custom on docker",
        {"llm": {"engine": "custom"}, "containers": [{"image": "me/x:1", "command": "serve"}]},
        "docker",
        {},
        [],
    ),
    (
        "command on process",
        {"containers": [{"command": "cat /etc/passwd"}]},
        "process",
        {"process_code": True},
        ["containers[0].command"],
    ),
    (
        "extra args on process",
        {"llm": {"extra_args": ["--x"]}},
        "process",
        {"process_code": True},
        ["llm.extra_args"],
    ),
    (
        "remote code on process",
        {"llm": {"options": {"--trust-remote-code": True}}},
        "process",
        {"process_code": True},
        ["llm.options"],
    ),
    (
        "LD_PRELOAD on process",
        {"containers": [{"env": [{"name": "LD_PRELOAD", "value": "x"}]}]},
        "process",
        {"process_code": True},
        ["containers[0].env[0].name"],
    ),
    (
        "tuning env on process",
        {"containers": [{"env": [{"name": "OMP_NUM_THREADS", "value": "2"}]}]},
        "process",
        {},
        [],
    ),
    (
        "dev mode",
        {"containers": [{"env": [{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}]}]},
        "docker",
        {"dev_mode": True},
        ["containers[0].env[0].name"],
    ),
    *[
        (
            f"registry {registry}",
            {"containers": [{"image": f"{registry}/team/vllm:1"}]},
            "docker",
            {"registries": [granted]},
            ["containers[0].image"],
        )
        for registry, granted in [
            ("127.0.0.1:5000", "127.0.0.1:5000"),
            ("localhost:5000", "localhost"),
            ("registry.localhost", "registry.localhost"),
            ("localhost.:5000", "localhost.:5000"),
            ("10.1.2.3", "10.1.2.3"),
            ("192.168.1.9:443", "192.168.1.9"),
            ("169.254.169.254", "169.254.169.254"),
            ("[::1]:5000", "[::1]:5000"),
            ("[::ffff:127.0.0.1]:5000", "[::ffff:127.0.0.1]"),
            ("[fe80::1]", "[fe80::1]"),
        ]
    ],
    ("registry public", {"containers": [{"image": "registry.corp/team/vllm:1"}]}, "docker", {}, []),
    ("registry public ip", {"containers": [{"image": "8.8.8.8:5000/vllm:1"}]}, "docker", {}, []),
    (
        "localhost, no port",
        {"containers": [{"image": "localhost/vllm:1"}]},
        "docker",
        {"registries": ["localhost"]},
        ["containers[0].image"],
    ),  # fmt: skip
]


@pytest.mark.parametrize(("parts", "runtime", "grants", "refused"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])  # fmt: skip
def test_a_capability_is_closed_by_default_and_opened_by_its_grant(parts, runtime, grants, refused):
    asked = spec(**parts)
    closed = refusals(asked, parse_grants({}), "team", runtime)
    assert sorted(closed) == sorted(refused)
    for messages in closed.values():
        assert "staff may grant it to workspace 'team' (grants." in messages[0]
    assert refusals(asked, parse_grants(grants), "team", runtime) == {}


@pytest.mark.parametrize(
    ("parts", "grants", "field"),
    [
        (nfs("nas", "/exports/a/../b"), {"nfs": ["nas:/exports/a"]}, "storage[0].nfs"),
        (nfs("nas", "/exports/ab"), {"nfs": ["nas:/exports/a"]}, "storage[0].nfs"),
        (nfs("other", "/exports/a"), {"nfs": ["nas:/exports/a"]}, "storage[0].nfs"),
        (
            {"storage": [{"mount_path": "/d", "pvc": {"claim_name": "kv", "read_only": False}}]},
            {"pvc": [{"claim": "kv"}]},
            "storage[0].pvc.read_only",
        ),
        (
            s3("s3://bk/p/", endpoint="http://127.0.0.1:9000", **KEYS),
            {"storage_endpoints": ["http://127.0.0.1:9001"]},
            "storage[0].s3.endpoint",
        ),
        (
            s3("s3://bk/p/", endpoint="https://127.0.0.1:9000", **KEYS),
            {"storage_endpoints": ["http://127.0.0.1:9000"]},
            "storage[0].s3.endpoint",
        ),
        (
            s3("s3://bk/p/", endpoint="http://127.0.0.1:9000/latest/meta-data", **KEYS),
            {"storage_endpoints": ["http://127.0.0.1:9000"]},
            "storage[0].s3.endpoint",
        ),
        (
            s3("s3://team-ab/x/"),
            {"platform_buckets": ["s3://team-a"]},
            "storage[0].s3.access_key_id",
        ),
        ({"llm": {"model": "s3://team-a/x/"}}, {"platform_buckets": ["oss://team-a"]}, "llm.model"),
        ({"metadata": {"resource": "h200"}}, {"resource_groups": ["h100"]}, "metadata.resource"),
        (dataset("d-9"), {"datasets": [{"id": "d-1*"}]}, "storage[0].dataset.id"),
        (
            dataset("d-1", read_only=False),
            {"datasets": [{"id": "d-*"}]},
            "storage[0].dataset.read_only",
        ),  # fmt: skip
        (
            {"containers": [{"image": "127.0.0.1:5000/vllm:1"}]},
            {"registries": ["127.0.0.1:5001", "localhost:5000", "127.0.0.2"]},
            "containers[0].image",
        ),
    ],
)
def test_a_grant_opens_only_what_it_names(parts, grants, field):
    assert field in refusals(spec(**parts), parse_grants(grants), "team", "docker")


def test_wharf_own_claims_are_refused_whatever_is_granted():
    asked = spec(storage=[{"mount_path": "/d", "pvc": {"claim_name": "wharf-models"}}])
    granted = parse_grants({"pvc": [{"claim": "wharf-models", "read_write": True}]})
    found = refusals(asked, granted, "team", "kubernetes", wharf_claims={"wharf-models"})
    assert "Wharf's own" in found["storage[0].pvc.claim_name"][0]


def test_an_approved_image_runs_on_the_host_network_without_the_grant():
    asked = spec(**NIXL, containers=[{"image": "registry.corp/vllm:0.9"}])
    assert refusals(asked, parse_grants({}), "t", "docker", ("registry.corp/vllm:0.9",)) == {}


@pytest.mark.parametrize(
    ("grants", "field"),
    [
        ({"nfs": ["nas/exports"]}, "grants.nfs"),
        ({"nfs": ["nas:relative"]}, "grants.nfs"),
        ({"storage_endpoints": ["ftp://x"]}, "grants.storage_endpoints"),
        ({"storage_endpoints": ["http://x/path"]}, "grants.storage_endpoints"),
        ({"platform_buckets": ["gs://b"]}, "grants.platform_buckets"),
        ({"pvc": [{"claim": "Bad_Name"}]}, "grants.pvc[0].claim"),
        ({"datasets": [{"id": "D_Upper"}]}, "grants.datasets[0].id"),
        ({"resource_groups": ["a b"]}, "grants.resource_groups"),
        ({"host_network": "yes"}, "grants.host_network"),
        ({"registries": ["http://127.0.0.1:5000"]}, "grants.registries"),
        ({"registries": ["127.0.0.1:5000/path"]}, "grants.registries"),
        ({"everything": True}, "grants.everything"),
    ],
)
def test_bad_grants_name_the_field(grants, field):
    with pytest.raises(GrantsError) as raised:
        parse_grants(grants)
    assert field in raised.value.errors


def test_an_approved_image_from_a_local_registry_needs_no_grant():
    asked = spec(containers=[{"image": "127.0.0.1:5000/vllm:0.9"}])
    assert refusals(asked, parse_grants({}), "t", "docker", ("127.0.0.1:5000/vllm:0.9",)) == {}


def test_endpoints_are_compared_normalised():
    granted = parse_grants({"storage_endpoints": ["HTTP://Minio.Corp:9000/"]})
    assert granted.storage_endpoints == ["http://minio.corp:9000"]
    asked = spec(**s3("s3://bk/p/", endpoint="http://minio.corp:9000", **KEYS))
    assert refusals(asked, granted, "t", "docker") == {}
