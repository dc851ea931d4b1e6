"""A PersistentVolumeClaim as a storage source (storage[i].pvc): the spec takes it, only a
Kubernetes runtime may run it, and the API says so with a 400 naming the entry."""

from __future__ import annotations

import pytest

from contracts.engines import render
from contracts.engines.plan import ContainerPlan, Mount
from contracts.spec import SpecError, parse_spec
from contracts.spec_rules import runtime_checks
from workers.runtimes.base import InstanceError, InstanceRequest
from workers.runtimes.docker import run_options

SPEC = {
    "name": "echo",
    "containers": [{"image": "busybox", "command": "sleep 1d", "port": 8001}],
    "storage": [
        {"mount_path": "/cache", "empty_dir": {"medium": "memory"}},
        {"mount_path": "/weights", "pvc": {"claim_name": "team-weights"}},
    ],
}


def test_a_claim_is_a_storage_source_read_only_by_default():
    (mount,) = [m for m in render(parse_spec(SPEC)).mounts if m.kind == "pvc"]
    assert mount == Mount("pvc", "/weights", "team-weights", read_only=True)


@pytest.mark.parametrize(("pvc", "field"), [
    ({"claim_name": "Team_Weights"}, "storage[0].pvc.claim_name"),
    ({"claim_name": ""}, "storage[0].pvc.claim_name"),
    ({"claim_name": "w", "read_only": "yes"}, "storage[0].pvc.read_only"),
    ({"claim_name": "w", "size": 1}, "storage[0].pvc.size"),
])  # fmt: skip
def test_a_claim_has_a_kubernetes_name(pvc, field):
    with pytest.raises(SpecError) as caught:
        parse_spec({**SPEC, "storage": [{"mount_path": "/w", "pvc": pvc}]})
    assert field in caught.value.errors


def test_an_entry_has_one_source_a_claim_included():
    entry = {"mount_path": "/w", "pvc": {"claim_name": "w"}, "nfs": {"server": "n", "path": "/"}}
    with pytest.raises(SpecError, match="exactly one of empty_dir, oss, obs, s3, nfs, pvc"):
        parse_spec({**SPEC, "storage": [entry]})


@pytest.mark.parametrize("runtime", ["", "docker", "process"])
def test_only_kubernetes_mounts_a_claim(runtime):
    errors = runtime_checks(parse_spec(SPEC), runtime)
    assert list(errors) == ["storage[1].pvc"]
    assert "WHARF_RUNTIME=kubernetes" in errors["storage[1].pvc"][0]
    assert runtime_checks(parse_spec(SPEC), "kubernetes") == {}


def test_the_docker_runtime_refuses_a_claim_it_was_handed_anyway(tmp_path):
    plan = ContainerPlan("busybox", ["sleep", "1"], 8001, mounts=[Mount("pvc", "/w", "claim")])
    request = InstanceRequest("echo", "echo-1", "h", plan, "")
    with pytest.raises(InstanceError, match="only on Kubernetes"):
        run_options(request, model_dir=str(tmp_path), bind_address="127.0.0.1")


@pytest.mark.parametrize("runtime", ["", "docker", "process"])
def test_the_api_refuses_a_claim_the_runtime_cannot_mount(api, settings, runtime):
    settings.WHARF_RUNTIME = runtime
    for path in ("/api/v1/services/preview", "/api/v1/services"):
        response = api.post(path, SPEC, format="json")
        assert response.status_code == 400, response.content
        assert list(response.json()["errors"]) == ["storage[1].pvc"]


def test_the_api_takes_a_claim_on_kubernetes(api, settings):
    settings.WHARF_RUNTIME = "kubernetes"
    response = api.post("/api/v1/services/preview", SPEC, format="json")
    assert response.status_code == 200, response.content
    (container,) = response.json()["containers"]
    assert {"kind": "pvc", "target": "/weights", "source": "team-weights", "size_bytes": None,
            "read_only": True} in container["mounts"]  # fmt: skip
