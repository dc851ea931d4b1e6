"""The Kubernetes objects a spec becomes (contracts.kube.manifests): pure, no cluster. Every
example spec renders objects that Kubernetes' published OpenAPI schemas accept (strict: no
field Kubernetes does not know), and each mapping from the spec and the engine's plan to the
objects is checked on its own: here the Deployment and its engine container; probes, secrets and
staging in tests/test_kube_manifests_pods.py."""

from __future__ import annotations

import json
from dataclasses import replace

import kubernetes_validate
import pytest
import yaml

from contracts.kube import names
from contracts.kube.manifests import ManifestError, root
from contracts.kube.names import KubeSettings
from contracts.limits import TenantLimits
from contracts.spec import parse_spec
from contracts.spec_facts import replicas
from tests.kube_manifest_support import (
    BASE,
    OWNER,
    ROOT,
    SETTINGS,
    SPECS,
    VERSIONS,
    deployment,
    engine,
    env_of,
    example,
    objects,
    pod,
    spec_with,
    volume,
)

# ---- every example -------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", SPECS, ids=lambda path: path.stem)
def test_every_example_spec_renders_objects_kubernetes_accepts(path, version):
    spec = parse_spec(json.loads(path.read_text()))
    rendered = [root(spec.name, 7, spec.spec_hash(), SETTINGS.namespace)] + objects(
        json.loads(path.read_text())
    )
    assert [o["kind"] for o in rendered].count("Deployment") == len(replicas(spec))
    for obj in rendered:
        kubernetes_validate.validate(obj, version, strict=True)
        assert obj["metadata"]["namespace"] == "llm"


def test_the_schema_check_refuses_what_kubernetes_would():
    good = deployment(objects(example("vllm-gpu-qwen")))
    typo = {**good, "spec": {**good["spec"], "replica": 1}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, VERSIONS[0], strict=True)
    template = good["spec"]["template"]
    container = {**template["spec"]["containers"][0], "ports": [{"containerPort": "8000"}]}
    bad = {**good, "spec": {**good["spec"], "template": {
        **template, "spec": {**template["spec"], "containers": [container]}}}}  # fmt: skip
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[0], strict=True)


@pytest.mark.parametrize("path", SPECS, ids=lambda path: path.stem)
def test_every_object_is_owned_by_the_root_and_labelled_with_its_service(path):
    data = json.loads(path.read_text())
    for obj in objects(data, version=7):
        meta = obj["metadata"]
        assert meta["ownerReferences"] == [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": OWNER.name, "uid": OWNER.uid,
            "blockOwnerDeletion": True, "controller": False,
        }]  # fmt: skip
        assert meta["labels"].items() >= names.labels(data["name"]).items()
        assert meta["annotations"] == {
            names.ANNOTATION_SERVICE: data["name"],
            names.ANNOTATION_VERSION: "7",
        }


# The Pod Security Standards' `restricted` profile, less non-root (engine images run as root).
RESTRICTED = {
    "allowPrivilegeEscalation": False, "privileged": False,
    "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
}  # fmt: skip


def restricted_for(container: dict) -> dict:
    """RESTRICTED, with the one capability the profile allows to add where the container
    serves below port 1024 (TGI's image listens on 80)."""
    if all(p["containerPort"] >= 1024 for p in container.get("ports", [])):
        return RESTRICTED
    return {**RESTRICTED, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}


@pytest.mark.parametrize("path", SPECS, ids=lambda path: path.stem)
def test_no_host_path_device_host_network_or_privilege(path):
    for obj in objects(json.loads(path.read_text())):
        text = json.dumps(obj)
        assert "hostPath" not in text and "hostNetwork" not in text and "/dev/davinci" not in text
        assert "/usr/local/Ascend" not in text
        if obj["kind"] == "Deployment":
            spec = obj["spec"]["template"]["spec"]
            for container in spec["containers"] + spec.get("initContainers", []):
                expected = restricted_for(container)
                if container["name"] == "front":  # and it writes nothing
                    expected = {**expected, "readOnlyRootFilesystem": True}
                assert container["securityContext"] == expected
            assert spec["automountServiceAccountToken"] is False
            assert spec["enableServiceLinks"] is False


def test_root_config_map_names_service_version_and_spec_hash():
    obj = root("My_Service", 4, "abc123def456", "llm")
    assert obj["apiVersion"] == "v1" and obj["kind"] == "ConfigMap"
    assert obj["metadata"]["name"] == names.root_name("My_Service")
    assert obj["metadata"]["namespace"] == "llm"
    assert obj["metadata"]["labels"] == names.labels("My_Service")
    assert obj["metadata"]["annotations"][names.ANNOTATION_SERVICE] == "My_Service"
    assert obj["data"] == {"service": "My_Service", "version": "4", "spec-hash": "abc123def456"}
    assert "ownerReferences" not in obj["metadata"]
    assert "namespace" not in root("s", 1, "h")["metadata"]


def test_objects_come_in_apply_order_secret_first():
    kinds = [
        (o["kind"], o["metadata"]["name"]) for o in objects(example("pd-vllm-ascend-ranktable"))
    ]
    service = "qwen2-7b-pd-ranktable"
    assert kinds == [
        ("Secret", names.secret_name(service)), ("ConfigMap", f"{service}-ranktable"),
        ("NetworkPolicy", f"{service}-ingress"),
        ("Deployment", f"{service}-prefill"), ("Deployment", f"{service}-decode"),
    ]  # fmt: skip


def test_only_the_gateway_the_worker_and_the_services_own_pods_reach_its_engines():
    (policy,) = [o for o in objects(example("pd-vllm-ascend-ranktable"))
                 if o["kind"] == "NetworkPolicy"]  # fmt: skip
    own = {names.LABEL_SERVICE: "qwen2-7b-pd-ranktable"}
    assert policy["spec"]["podSelector"] == {"matchLabels": own}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert [peer["podSelector"]["matchLabels"] for peer in rule["from"]] == [
        {"app.kubernetes.io/name": "wharf-gateway"}, {"app.kubernetes.io/name": "wharf-worker"},
        own,
    ]  # fmt: skip
    assert all(set(peer) == {"podSelector"} for peer in rule["from"])  # no other namespace
    assert "ports" not in rule  # every port of its pods: serving, metrics, KV side channel
    policies = yaml.safe_load_all((ROOT / "deploy/kubernetes/base/networkpolicy.yaml").read_text())
    deny = next(p for p in policies if p["metadata"]["name"] == "wharf-engines-default-deny")
    assert deny["spec"] == {"podSelector": {"matchLabels": {names.LABEL_MANAGED_BY: "wharf"}},
                            "policyTypes": ["Ingress"]}  # fmt: skip


@pytest.mark.parametrize(
    ("image", "policy"),
    [("registry.corp/team-a/engine:7", "Always"), ("vllm/vllm-openai:v0.32.0", None), (None, None)],
)
def test_a_workspaces_own_image_is_pulled_on_every_start(image, policy):
    """The kubelet asks the registry with the service's pull secret each time, rather than
    running a private image another workspace left in the node's store."""
    data = spec_with(containers=[{"image": image}]) if image else BASE
    platform = replace(SETTINGS, platform_images=frozenset({"vllm/vllm-openai:v0.32.0"}))
    (deployment,) = [o for o in objects(data, platform) if o["kind"] == "Deployment"]
    engine, _ = deployment["spec"]["template"]["spec"]["containers"]
    assert engine.get("imagePullPolicy") == policy


# ---- the Deployment -------------------------------------------------------------------------


def test_selector_leaves_out_the_spec_hash_the_pod_template_carries():
    data = example("pd-vllm-gpu-nixl")
    spec_hash = parse_spec(data).spec_hash()
    objs = objects(data)
    for role, count in (("prefill", 2), ("decode", 1)):
        found = deployment(objs, role)
        assert found["spec"]["replicas"] == count
        assert found["spec"]["selector"] == {"matchLabels": names.labels(data["name"], role)}
        template = found["spec"]["template"]["metadata"]["labels"]
        assert template == names.labels(data["name"], role, spec_hash)
        assert found["metadata"]["labels"] == template


def test_a_new_version_that_only_scales_leaves_the_pod_template_alone():
    before = deployment(objects(BASE, counts={"": 1}, version=3))
    after = deployment(objects(BASE, counts={"": 4}, version=4))
    assert after["spec"]["replicas"] == 4
    assert after["metadata"]["annotations"][names.ANNOTATION_VERSION] == "4"
    assert after["spec"]["template"] == before["spec"]["template"]


STRATEGIES = [
    (None, 3, (1, 0)),
    ({"max_surge": "50%", "max_unavailable": "25%"}, 4, (2, 1)),
    ({"max_surge": "10%", "max_unavailable": "30%"}, 9, (1, 2)),
    ({"max_surge": 0, "max_unavailable": 1}, 3, (0, 1)),
    ({"max_surge": "25%", "max_unavailable": 0}, 0, (1, 0)),  # no pods: never 0 and 0
]


@pytest.mark.parametrize(("strategy", "count", "expected"), STRATEGIES)
def test_rolling_strategy_resolves_to_surge_and_unavailable(strategy, count, expected):
    found = deployment(objects(spec_with(rolling_strategy=strategy), counts={"": count}))["spec"]
    assert found["strategy"] == {"type": "RollingUpdate", "rollingUpdate": dict(
        zip(("maxSurge", "maxUnavailable"), expected, strict=True))}  # fmt: skip
    assert found["progressDeadlineSeconds"] == 600 and found["revisionHistoryLimit"] == 3


def test_progress_deadline_comes_from_the_settings():
    found = deployment(objects(BASE, KubeSettings(model_store_claim="m", progress_deadline_s=90)))
    assert found["spec"]["progressDeadlineSeconds"] == 90


@pytest.mark.parametrize(("grace", "pre_stop", "total"), [(30, 5, 35), (120, 10, 130), (0, 0, 0)])
def test_grace_period_is_the_specs_plus_the_pre_stop_wait(grace, pre_stop, total):
    data = spec_with(metadata={"termination_grace_period": grace})
    objs = objects(data, KubeSettings(model_store_claim="m", pre_stop_s=pre_stop))
    assert pod(objs)["terminationGracePeriodSeconds"] == total
    lifecycle = {"preStop": {"sleep": {"seconds": pre_stop}}} if pre_stop else None
    assert engine(objs).get("lifecycle") == lifecycle


def test_node_selector_follows_the_resource_group():
    assert pod(objects(spec_with(metadata={"resource": "a100"})))["nodeSelector"] == {
        "resource": "a100"
    }
    assert "nodeSelector" not in pod(objects(BASE))


# ---- the engine container -------------------------------------------------------------------

CARDS = [
    (BASE, SETTINGS, "", {"nvidia.com/gpu": "1"}),
    (spec_with(metadata={"gpu": 2}, llm={"tensor_parallel_size": 2}), SETTINGS, "",
     {"nvidia.com/gpu": "2"}),
    (BASE, KubeSettings(model_store_claim="m", gpu_resource="amd.com/gpu"), "",
     {"amd.com/gpu": "1"}),
    (example("vllm-ascend-2npu"), SETTINGS, "", {"huawei.com/Ascend910": "2"}),
    (example("vllm-ascend-2npu"), KubeSettings(model_store_claim="m",
     npu_resource="huawei.com/Ascend910B"), "", {"huawei.com/Ascend910B": "2"}),
    (example("pd-vllm-gpu-nixl"), SETTINGS, "prefill", {"nvidia.com/gpu": "1"}),
    (example("pd-vllm-gpu-nixl"), SETTINGS, "decode", {"nvidia.com/gpu": "2"}),
    (example("pd-vllm-ascend-mooncake"), SETTINGS, "decode", {"huawei.com/Ascend910": "4"}),
    (example("demo-tiny-vllm"), SETTINGS, "", {}),
]  # fmt: skip


@pytest.mark.parametrize(("data", "settings", "role", "cards"), CARDS)
def test_cards_are_limits_of_the_device_plugins_resource(data, settings, role, cards):
    limits = engine(objects(data, settings), role)["resources"]["limits"]
    assert {k: v for k, v in limits.items() if k not in ("cpu", "memory")} == cards


@pytest.mark.parametrize(("metadata", "requests"), [
    ({"cpu": 8, "memory": 32000}, {"cpu": "8", "memory": "32000Mi"}),
    ({"cpu": 0.5}, {"cpu": "500m", "memory": "0"}),
    ({"cpu": 2.25, "memory": 1024}, {"cpu": "2250m", "memory": "1024Mi"}),
    # Kubernetes would copy the limits into requests left out: the defaults reserve nothing.
    ({}, {"cpu": "0", "memory": "0"}),
])  # fmt: skip
def test_cpu_and_memory_are_requests(metadata, requests):
    assert engine(objects(spec_with(metadata=metadata)))["resources"]["requests"] == requests


def without_metadata(data: dict) -> dict:
    return {k: v for k, v in data.items() if k != "metadata"}


LIMITS = TenantLimits(memory_mb=4096, cpus=2, pids=512, memory_empty_dir_mb=1024)
BOUNDED = replace(SETTINGS, limits=LIMITS)


@pytest.mark.parametrize(("data", "settings", "role", "limits"), [
    # The spec's own, whatever the defaults.
    (spec_with(metadata={"cpu": 6, "memory": 30000}), BOUNDED, "", ("6", "30000Mi")),
    (spec_with(metadata={"cpu": 0.5}), BOUNDED, "", ("500m", "4Gi")),
    # The operator's defaults, per card (an instance without cards counts once).
    (BASE, BOUNDED, "", ("2", "4Gi")),
    (spec_with(metadata={"gpu": 2}, llm={"tensor_parallel_size": 2}), BOUNDED, "", ("4", "8Gi")),
    ({"name": "tiny", "llm": {"engine": "vllm-cpu", "model": "tiny"}}, BOUNDED, "", ("2", "4Gi")),
    (example("pd-vllm-gpu-nixl"), BOUNDED, "decode", ("16", "64000Mi")),
    (without_metadata(example("pd-vllm-gpu-nixl")), BOUNDED, "prefill", ("2", "4Gi")),
    (without_metadata(example("pd-vllm-gpu-nixl")), BOUNDED, "decode", ("4", "8Gi")),
    # Wharf's own defaults where the operator set none.
    (BASE, SETTINGS, "", ("8", "16Gi")),
])  # fmt: skip
def test_every_engine_has_cpu_and_memory_limits_from_the_spec_or_the_defaults(
    data, settings, role, limits
):
    found = engine(objects(data, settings), role)["resources"]["limits"]
    assert (found["cpu"], found["memory"]) == limits


def test_init_containers_are_bounded_and_restricted_as_the_engine():
    data = spec_with(llm={"model": "s3://bucket/qwen/"}, metadata={"cpu": 3})
    spec = pod(objects(data, BOUNDED))
    (stage,) = spec["initContainers"]
    assert stage["resources"] == {"requests": {"cpu": "3", "memory": "0"},
                                  "limits": {"cpu": "3", "memory": "4Gi"}}  # fmt: skip
    assert stage["securityContext"] == RESTRICTED


def test_a_port_below_1024_keeps_only_net_bind_service():
    data = {"name": "web", "containers": [{"image": "nginx:1", "command": "nginx", "port": 80}]}
    context = engine(objects(data))["securityContext"]
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}


@pytest.mark.parametrize(("data", "size"), [
    (BASE, "1Gi"),  # vLLM's own default
    (spec_with(metadata={"shm_size": 16}), "16Gi"),
    (spec_with(metadata={"gpu": 2}, llm={"tensor_parallel_size": 2}), "64Gi"),  # multi-card
    (spec_with(storage=[{"mount_path": "/dev/shm",
                         "empty_dir": {"medium": "memory", "size_limit": 8}}]), "8Gi"),
])  # fmt: skip
def test_shared_memory_is_a_memory_empty_dir_of_the_plans_size(data, size):
    mount, found = volume(objects(data), "/dev/shm")
    assert found["emptyDir"] == {"medium": "Memory", "sizeLimit": size}
    assert mount["readOnly"] is False


def test_no_shared_memory_volume_where_the_plan_sets_none():
    assert all(v["name"] != "dshm" for v in pod(objects(example("custom-container")))["volumes"])


MOUNTS = [
    ({"mount_path": "/cache", "empty_dir": {"medium": "memory", "size_limit": 2}},
     {"emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}, {"readOnly": False}),
    ({"mount_path": "/scratch", "empty_dir": {"size_limit": 50}},
     {"emptyDir": {"sizeLimit": "50Gi"}}, {"readOnly": False}),
    ({"mount_path": "/data", "nfs": {"server": "10.0.0.9", "path": "/exports/d", "readOnly": True}},
     {"nfs": {"server": "10.0.0.9", "path": "/exports/d", "readOnly": True}}, {"readOnly": True}),
    ({"mount_path": "/data", "nfs": {"server": "nas", "path": "/d"}},
     {"nfs": {"server": "nas", "path": "/d", "readOnly": False}}, {"readOnly": False}),
    ({"mount_path": "/weights", "pvc": {"claim_name": "team-weights"}},
     {"persistentVolumeClaim": {"claimName": "team-weights", "readOnly": True}},
     {"readOnly": True}),
    ({"mount_path": "/out", "pvc": {"claim_name": "out.v2", "read_only": False}},
     {"persistentVolumeClaim": {"claimName": "out.v2", "readOnly": False}}, {"readOnly": False}),
    ({"mount_path": "/ckpt", "s3": {"path": "s3://bucket/ckpt/"}},
     {"emptyDir": {}}, {"readOnly": True, "subPath": "0"}),
]  # fmt: skip


@pytest.mark.parametrize(("entry", "size"), [
    ({"medium": "memory"}, "1Gi"),  # the cap, where the spec names no size
    ({"medium": "memory", "size_limit": 1}, "1Gi"),
    # Saved before the operator lowered the cap (the API refuses it now): the cap.
    ({"medium": "memory", "size_limit": 3}, "1Gi"),
])  # fmt: skip
def test_every_memory_empty_dir_has_a_size_at_most_the_cap(entry, size):
    data = spec_with(storage=[{"mount_path": "/cache", "empty_dir": entry}])
    _, found = volume(objects(data, BOUNDED), "/cache")
    assert found["emptyDir"] == {"medium": "Memory", "sizeLimit": size}


@pytest.mark.parametrize(("entry", "source", "mount"), MOUNTS)
def test_storage_entries_become_volumes(entry, source, mount):
    found_mount, found = volume(objects(spec_with(storage=[entry])), entry["mount_path"])
    assert {k: v for k, v in found.items() if k != "name"} == source
    assert {k: v for k, v in found_mount.items() if k not in ("name", "mountPath")} == mount


def test_the_model_store_is_the_read_only_claim_mounted_per_model():
    data = spec_with(llm={"engine": "vllm-cpu", "model": "org/main",
                          "speculative": {"model": "draft", "method": "draft_model"}},
                     metadata={"gpu": 0})  # fmt: skip
    objs = objects(data)
    for model in ("org/main", "draft"):
        mount, found = volume(objs, f"/models/{model}")
        assert mount == {"name": "model-store", "mountPath": f"/models/{model}",
                         "readOnly": True, "subPath": model}  # fmt: skip
        assert found["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    assert engine(objs)["args"][engine(objs)["args"].index("--model") + 1] == "/models/org/main"


@pytest.mark.parametrize(("llm", "field"), [
    ({"model": "qwen"}, "llm.model"),
    ({"model": "s3://bk/main/", "speculative": {"model": "draft", "method": "draft_model"}},
     "llm.speculative.model"),
])  # fmt: skip
def test_a_model_store_model_without_a_claim_names_its_field(llm, field):
    with pytest.raises(ManifestError, match="WHARF_K8S_MODEL_CLAIM") as caught:
        objects(spec_with(llm=llm), KubeSettings())
    assert caught.value.field == field and str(caught.value).startswith(f"{field}: ")


def test_a_shared_kv_folder_needs_a_read_write_many_claim():
    data = example("pd-vllm-cpu-1p1d")
    with pytest.raises(ManifestError) as caught:
        objects(data, KubeSettings(model_store_claim="models"))
    assert caught.value.field == "llm.pd.kv_connector"
    for role in ("prefill", "decode"):
        mount, found = volume(objects(data), "/kv", role)
        assert found["persistentVolumeClaim"] == {"claimName": "kv-share"}
        assert mount["subPath"] == "wharf-kv-pd-tiny" and mount["readOnly"] is False


@pytest.mark.parametrize(("data", "role", "ports"), [
    (BASE, "", [("engine", 8000)]),
    (spec_with(containers=[{"port": 8123}]), "", [("engine", 8123)]),
    (example("pd-vllm-gpu-nixl"), "prefill", [("engine", 8000), ("kv", 9000)]),
    (example("pd-vllm-ascend-mooncake"), "prefill",
     [("engine", 8000), ("kv", 9000), ("kv-1", 9001)]),
    (example("pd-vllm-ascend-mooncake"), "decode",
     [("engine", 8000), ("kv", 9000), ("kv-1", 9001), ("kv-2", 9002), ("kv-3", 9003)]),
    (example("pd-vllm-cpu-1p1d"), "decode", [("engine", 8000)]),  # a shared folder, no port
])  # fmt: skip
def test_ports_are_the_serving_port_and_the_kv_side_channel(data, role, ports):
    """The engine's own: the pod's `http` port is its front's (contracts.kube.front)."""
    found = engine(objects(data), role)["ports"]
    assert [(p["name"], p["containerPort"]) for p in found] == ports
    assert {p["protocol"] for p in found} == {"TCP"}


def test_peers_reach_the_kv_side_channel_at_the_pods_ip():
    container = engine(objects(example("pd-vllm-gpu-nixl")), "decode")
    assert container["env"][0] == {
        "name": "WHARF_POD_IP",
        "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
    }
    assert env_of(container)["VLLM_NIXL_SIDE_CHANNEL_HOST"]["value"] == "$(WHARF_POD_IP)"
    assert "0.0.0.0" in container["args"]  # it listens on every interface of its pod


def test_command_and_environment_reach_the_engine_literally():
    data = {"name": "echo", "containers": [{
        "image": "busybox", "command": "echo $(hostname) $HOME $$", "port": 8001,
        "env": [{"name": "GREETING", "value": "a$(B)c"}]}]}  # fmt: skip
    container = engine(objects(data))
    # The kubelet turns $$ into $ and expands $(NAME): escaped, the shell gets what was written.
    assert container["command"] == ["/bin/sh"]
    assert container["args"] == ["-c", "echo $$(hostname) $$HOME $$$$"]
    assert env_of(container)["GREETING"]["value"] == "a$$(B)c"
    assert container["image"] == "busybox"
