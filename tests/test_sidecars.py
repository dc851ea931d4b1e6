"""Several containers in one instance (EAS's multi-container services), the pure parts: the
spec's rules, the engine plan's sidecars and the preview, the grants a sidecar's image,
command and env are under, the Docker options of a sidecar and of its main container, and
the pod a Kubernetes instance becomes (checked against Kubernetes' own schemas)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import kubernetes_validate
import pytest

from contracts.eas import normalise
from contracts.engines import render, validate
from contracts.engines.plan import Placement
from contracts.grants import Grants, refusals, tenant_code
from contracts.kube.manifests import Owner
from contracts.kube.manifests import render as render_objects
from contracts.kube.names import KubeSettings
from contracts.limits import TenantLimits
from contracts.spec import SpecError, parse_spec
from contracts.spec_facts import replicas
from contracts.spec_rules import runtime_checks
from workers.runtimes.base import InstanceRequest
from workers.runtimes.docker import run_options
from workers.runtimes.docker_sidecars import (
    LABEL_CONTAINER,
    LABEL_SIDECAR,
    LABEL_SIDECARS,
    sidecar_options,
    sidecars_down,
)

CORPUS = Path(__file__).parent / "eas_corpus" / "37-pai-rag-multi-container.json"
LIMITS = TenantLimits(memory_mb=2048, cpus=2.0, pids=512)


def three(**changes) -> dict:
    """A main container proxying to two others on localhost, as the RAG service is."""
    spec = {"name": "rag", "containers": [
        {"image": "nginx:1", "port": 8680, "script": "nginx"},
        {"image": "ui:1", "port": 8002, "script": "ui"},
        {"image": "api:1", "port": 8001, "script": "serve",
         "env": [{"name": "SOURCE", "value": "local"}]},
    ], "metadata": {"cpu": 4, "memory": 8000}}  # fmt: skip
    spec.update(changes)
    return spec


def errors_of(data: dict) -> dict[str, list[str]]:
    """The API's errors: the spec's rules, then the engine's (the containers' ports)."""
    try:
        spec = parse_spec(data)
    except SpecError as exc:
        return exc.errors
    return validate(spec)


def container(i: int, **fields) -> dict:
    base = three()["containers"][i]
    return {**base, **fields}


@pytest.mark.parametrize(
    ("containers", "extra", "field", "says"),
    [
        (
            [container(0), {"port": 8002, "script": "ui"}],
            {},
            "containers[1].image",
            "image is required",
        ),  # fmt: skip
        (
            [{"port": 8000}, {"port": 8002, "script": "ui"}],
            {"llm": {"engine": "vllm-cpu", "model": "tiny"}},
            "containers[1].image",
            "needs its image",
        ),  # fmt: skip
        (
            [container(0), container(1, readiness_check={"tcp_socket": {"port": 8002}})],
            {},
            "containers[1].readiness_check",
            "only containers[0]'s probes are run",
        ),  # fmt: skip
        (
            [container(0), container(1, prepare={"pythonRequirements": ["x"]})],
            {},
            "containers[1].prepare",
            "installed before containers[0]'s command only",
        ),  # fmt: skip
        (
            [container(0), container(1, port=8680)],
            {},
            "containers[1].port",
            "port 8680 is containers[0]'s",
        ),  # fmt: skip
        (
            [container(0), container(1), container(2, port=8002)],
            {},
            "containers[2].port",
            "port 8002 is containers[1]'s",
        ),  # fmt: skip
        (
            [container(0), container(1, port=18999)],
            {},
            "containers[1].port",
            "the engine's front's",
        ),  # fmt: skip
        (
            [{"port": None}, container(1, port=8000)],
            {"llm": {"engine": "vllm-cpu", "model": "tiny"}},
            "containers[1].port",
            "port 8000 is containers[0]'s",
        ),  # the engine's default port  # fmt: skip
        ([container(0)] * 9, {}, "containers", "at most 8"),
    ],
)
def test_the_containers_beside_the_main_one_are_checked_by_name(containers, extra, field, says):
    data = {**three(containers=[{k: v for k, v in c.items() if v is not None}
                                for c in containers]), **extra}  # fmt: skip
    errors = errors_of(data)
    assert field in errors, errors
    assert says in " ".join(errors[field])


def test_sidecars_beside_a_prefill_decode_service_are_refused():
    data = {"name": "pd", "containers": [{"port": 8000}, container(1)],
            "llm": {"engine": "vllm-cpu", "model": "tiny",
                    "pd": {"prefill": {}, "decode": {}}}}  # fmt: skip
    assert "one container per instance" in errors_of(data)["containers"][0]


def test_three_containers_as_published_are_taken():
    assert errors_of(three()) == {}
    spec = parse_spec(normalise(json.loads(CORPUS.read_text())))
    assert validate(spec) == {} and len(spec.containers) == 3


def test_an_engine_with_a_sidecar_is_taken():
    data = {"name": "chat", "llm": {"engine": "vllm-cpu", "model": "tiny"},
            "containers": [{"port": 8000}, container(1)]}  # fmt: skip
    assert errors_of(data) == {}


def test_the_process_runtime_needs_each_sidecars_command_also_beside_an_engine():
    data = {"name": "chat", "llm": {"engine": "vllm-cpu", "model": "tiny"},
            "containers": [{"port": 8000}, {"image": "ui:1", "port": 8002}]}  # fmt: skip
    spec = parse_spec(data)
    assert list(runtime_checks(spec, "process")) == ["containers[1].command"]
    assert runtime_checks(spec, "docker") == {}


def test_each_sidecar_is_planned_with_its_image_command_env_and_the_operators_bounds():
    plan = render(parse_spec(three()), Placement(limits=LIMITS))
    assert (plan.image, plan.port, plan.args) == ("nginx:1", 8680, ["/bin/sh", "-c", "nginx"])
    assert plan.cpus == 4 and plan.memory_bytes == 8000 * 1024**2  # the instance's metadata
    ui, api = plan.sidecars
    assert (ui.index, ui.image, ui.port, ui.args) == (1, "ui:1", 8002, ["/bin/sh", "-c", "ui"])
    assert api.env == {"SOURCE": "local"} and "PORT" not in api.env
    for sidecar in (ui, api):
        assert (sidecar.cpus, sidecar.memory_bytes, sidecar.pids_limit) == (
            2.0, 2048 * 1024**2, 512)  # fmt: skip


def test_a_sidecar_without_a_command_runs_its_images_entrypoint():
    data = three(containers=[container(0), {"image": "ui:1", "port": 8002}])
    (ui,) = render(parse_spec(data)).sidecars
    assert ui.args == []


def test_sidecars_see_the_instances_storage_but_not_the_engines_model():
    data = {"name": "chat", "llm": {"engine": "vllm-cpu", "model": "tiny"},
            "containers": [{"port": 8000}, container(1)],
            "storage": [{"mount_path": "/data", "nfs": {"server": "10.0.0.2", "path": "/x"}},
                        {"mount_path": "/scratch",
                         "empty_dir": {"medium": "memory", "size_limit": 1}}]}  # fmt: skip
    plan = render(parse_spec(data), Placement(limits=LIMITS))
    (ui,) = plan.sidecars
    assert [(m.kind, m.target) for m in ui.mounts] == [("nfs", "/data"), ("tmpfs", "/scratch")]
    assert any(m.target.startswith("/models") for m in plan.mounts)  # the engine's alone
    assert ui.mounts[1].size_bytes == 1024**3


def test_the_preview_shows_every_containers_command():
    preview = render(parse_spec(three())).preview()
    assert preview["command"] == ["/bin/sh", "-c", "nginx"]
    assert [(s["index"], s["command"]) for s in preview["sidecars"]] == [
        (1, ["/bin/sh", "-c", "ui"]), (2, ["/bin/sh", "-c", "serve"])]  # fmt: skip
    assert "args" not in preview["sidecars"][0]


def test_a_sidecars_image_command_and_env_are_the_tenants_code():
    preload = [{"name": "LD_PRELOAD", "value": "x.so"}]
    data = three(containers=[container(0, image="nginx:1"), container(1, env=preload)])
    code = dict(tenant_code(parse_spec(data), approved_images=("nginx:1",)))
    assert set(code) == {"containers[0].script", "containers[1].image", "containers[1].script",
                         "containers[1].env[0].name"}  # fmt: skip
    refused = refusals(parse_spec(data), Grants(), "team", "process", ("nginx:1",))
    assert "containers[1].env[0].name" in refused and "containers[1].image" in refused


def test_a_sidecar_image_from_a_local_registry_is_refused_by_name():
    data = three(containers=[container(0), container(1, image="10.0.0.5:5000/ui:1")])
    refused = refusals(parse_spec(data), Grants(), "team", "docker")
    assert "registry 10.0.0.5:5000 is at a local address" in refused["containers[1].image"][0]
    granted = Grants(registries=["10.0.0.5:5000"])
    assert "containers[1].image" not in refusals(parse_spec(data), granted, "team", "docker")


def request_of(data: dict, key: str = "") -> InstanceRequest:
    plan = render(parse_spec(data), Placement(limits=LIMITS))
    return InstanceRequest("rag", "rag-1", "abc123", plan, engine_key=key)


def test_a_sidecar_joins_the_main_containers_network_and_restarts_only_with_it():
    request = request_of(three())
    options = sidecar_options(request, request.plan.sidecars[1], "main-id", "node-a", [])
    assert options["network_mode"] == "container:main-id" and "ports" not in options
    assert options["name"] == "rag-1-c2"
    assert options["labels"][LABEL_SIDECAR] == "rag-1" and options["labels"][LABEL_CONTAINER] == "2"
    assert options["labels"]["wharf.node"] == "node-a"
    assert options["restart_policy"] == {"Name": "no"}
    assert options["environment"] == {"SOURCE": "local"}
    assert options["entrypoint"] == ["/bin/sh"] and options["command"] == ["-c", "serve"]
    assert (options["mem_limit"], options["nano_cpus"], options["pids_limit"]) == (
        2048 * 1024**2, 2 * 10**9, 512)  # fmt: skip
    assert options["cap_drop"] == ["ALL"] and options["security_opt"] == ["no-new-privileges"]
    assert options["init"] is True  # its command is not PID 1: stopped by SIGTERM


@pytest.mark.parametrize("key", ["", "engine-key"])
def test_a_main_container_with_sidecars_is_not_restarted_by_docker(key):
    options = run_options(request_of(three(), key), model_dir="/m", bind_address="127.0.0.1")
    assert options["restart_policy"] == {"Name": "no"}
    assert options["labels"][LABEL_SIDECARS] == "2"
    alone = run_options(request_of(three(containers=[container(0)])), model_dir="/m",
                        bind_address="127.0.0.1")  # fmt: skip
    assert alone["restart_policy"]["Name"] == "on-failure"
    assert LABEL_SIDECARS not in alone["labels"]


def docker_container(name: str, running: bool, code: int = 0, sidecars: int = 0):
    """What sidecars_down reads of a docker-py container."""
    labels = {LABEL_SIDECARS: str(sidecars)} if sidecars else {LABEL_CONTAINER: name[-1]}
    return SimpleNamespace(name=name, labels=labels,
                           attrs={"State": {"Running": running, "ExitCode": code}})  # fmt: skip


@pytest.mark.parametrize(
    ("sidecars", "down"),
    [
        ([("rag-1-c1", True, 0), ("rag-1-c2", True, 0)], ""),
        ([("rag-1-c1", True, 0), ("rag-1-c2", False, 3)], "containers[2] exited with code 3"),
        ([("rag-1-c2", False, 1), ("rag-1-c1", False, 0)], "containers[1] exited with code 0"),
        ([("rag-1-c1", True, 0)], "a container beside the main one is gone"),
    ],
)
def test_an_instance_is_down_when_any_of_its_sidecars_is(sidecars, down):
    main = docker_container("rag-1", True, sidecars=2)
    assert sidecars_down(main, [docker_container(*s) for s in sidecars]) == down


def pod_of(data: dict) -> dict:
    spec = parse_spec(data)
    counts = replicas(spec)
    settings = KubeSettings(namespace="llm", model_store_claim="models",
                            platform_images=frozenset({"nginx:1"}))  # fmt: skip
    owner = Owner("svc-wharf", "6f1c8a54-0000-4000-8000-000000000001")
    objects = render_objects(spec.name, spec, 1, counts, settings, owner,
                             {"": "engine-key-value-7c1d"})  # fmt: skip
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    for version in ("1.33.0", "1.37.0"):
        kubernetes_validate.validate(deployment, version, strict=True)
    return deployment["spec"]["template"]["spec"]


def test_a_pod_holds_every_container_sharing_the_storage_volumes():
    data = three(storage=[{"mount_path": "/data", "nfs": {"server": "10.0.0.2", "path": "/x"}},
                          {"mount_path": "/tmp/work", "empty_dir": {}}],
                 dockerAuth="dXNlcjpwYXNz")  # fmt: skip
    pod = pod_of(data)
    names = [c["name"] for c in pod["containers"]]
    assert names == ["engine", "front", "container-1", "container-2"]
    engine, _, ui, api = pod["containers"]
    assert ui["image"] == "ui:1" and ui["command"] == ["/bin/sh"] and ui["args"] == ["-c", "ui"]
    assert ui["ports"] == [{"containerPort": 8002, "protocol": "TCP"}]
    assert api["env"] == [{"name": "SOURCE", "value": "local"}]
    assert {m["mountPath"] for m in ui["volumeMounts"]} == {"/data", "/tmp/work"}
    assert ui["volumeMounts"] == [m for m in engine["volumeMounts"]
                                  if m["mountPath"] in ("/data", "/tmp/work")]  # fmt: skip
    assert ui["resources"]["limits"] == {"cpu": "8", "memory": "16Gi"}  # the operator's
    assert ui["imagePullPolicy"] == "Always" and "imagePullPolicy" not in engine  # approved
    assert "readinessProbe" not in ui and "livenessProbe" not in ui


def test_a_pods_sidecar_on_a_low_port_may_bind_it_and_nothing_more():
    pod = pod_of(three(containers=[container(0), container(1, port=80)]))
    capabilities = pod["containers"][2]["securityContext"]["capabilities"]
    assert capabilities == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
