"""The Kubernetes objects a spec becomes (contracts.kube.manifests), continued from
tests/test_kube_manifests.py: the engine's probes, the service's secrets, the files Wharf
generates for it and the init containers that stage its models. Pure, no cluster."""

from __future__ import annotations

import base64
import json

import kubernetes_validate
import pytest

from contracts.kube import names
from contracts.kube.manifests import render
from contracts.kube.names import KubeSettings
from contracts.spec import parse_spec
from contracts.spec_facts import replicas
from tests.kube_manifest_support import (
    BASE,
    OWNER,
    SETTINGS,
    SPECS,
    VERSIONS,
    deployment,
    engine,
    env_of,
    example,
    keys_for,
    objects,
    pod,
    spec_with,
    volume,
)

# ---- probes ---------------------------------------------------------------------------------

HTTP_HEALTH = {"httpGet": {"path": "/health", "port": "engine"}}
PROBES = [
    (BASE, SETTINGS, HTTP_HEALTH, (5, 2, 3, 1), (0, 180)),
    (spec_with(health_check={"path": "/ready", "period_seconds": 10, "timeout_seconds": 3,
                             "failure_threshold": 5, "success_threshold": 2}), SETTINGS,
     {"httpGet": {"path": "/ready", "port": "engine"}}, (10, 3, 5, 2), (0, 90)),
    (spec_with(health_check={"initial_delay_seconds": 60, "period_seconds": 10,
                             "startup_timeout_seconds": 300}), SETTINGS,
     HTTP_HEALTH, (10, 2, 3, 1), (60, 24)),
    (BASE, KubeSettings(model_store_claim="m", health_timeout_s=120), HTTP_HEALTH,
     (5, 2, 3, 1), (0, 24)),
    (example("bladellm-speculative"), SETTINGS, {"tcpSocket": {"port": "engine"}}, (5, 2, 3, 1),
     (0, 180)),  # no health path: a TCP check
]  # fmt: skip


@pytest.mark.parametrize(("data", "settings", "check", "readiness", "startup"), PROBES)
def test_readiness_and_startup_probes_follow_the_health_check(
    data, settings, check, readiness, startup
):
    container = engine(objects(data, settings))
    period, timeout, failures, successes = readiness
    assert container["readinessProbe"] == {
        **check, "periodSeconds": period, "timeoutSeconds": timeout,
        "failureThreshold": failures, "successThreshold": successes,
    }  # fmt: skip
    delay, budget = startup
    assert container["startupProbe"] == {
        **check, "initialDelaySeconds": delay, "periodSeconds": period,
        "timeoutSeconds": timeout, "failureThreshold": budget, "successThreshold": 1,
    }  # fmt: skip
    assert "livenessProbe" not in container


def test_liveness_probe_only_when_the_spec_asks_for_one():
    liveness = {"initial_delay_seconds": 30, "period_seconds": 20, "timeout_seconds": 4,
                "failure_threshold": 6}  # fmt: skip
    container = engine(objects(spec_with(health_check={"liveness": liveness})))
    assert container["livenessProbe"] == {
        **HTTP_HEALTH, "initialDelaySeconds": 30, "periodSeconds": 20, "timeoutSeconds": 4,
        "failureThreshold": 6, "successThreshold": 1,
    }  # fmt: skip
    own = engine(objects(spec_with(health_check={"liveness": {"path": "/live"}})))
    assert own["livenessProbe"]["httpGet"] == {"path": "/live", "port": "engine"}


# ---- secrets --------------------------------------------------------------------------------

ACCESS_ID, ACCESS_SECRET = "LTAI-id-5f3e", "oss-secret-value-91ac"


def secret_values(secret: dict) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


@pytest.mark.parametrize("path", SPECS, ids=lambda path: path.stem)
def test_secret_values_are_only_in_the_secret(path):
    data = json.loads(path.read_text())
    values = list(keys_for(replicas(parse_spec(data))).values())
    for entry in data.get("storage", []):
        for store in (entry.get(scheme) for scheme in ("oss", "obs", "s3")):
            if store:  # credentials of the spec's own
                store.update(access_key_id=ACCESS_ID, access_key_secret=ACCESS_SECRET)
                values += [ACCESS_ID, ACCESS_SECRET]
    objs = objects(data)
    (secret,) = [o for o in objs if o["kind"] == "Secret"]
    assert secret["type"] == "Opaque" and set(values) <= set(secret_values(secret).values())
    for obj in objs:
        if obj["kind"] != "Secret":
            assert not any(value in json.dumps(obj) for value in values), obj["kind"]


@pytest.mark.parametrize(("data", "roles"), [
    (BASE, {"": "engine-key"}),
    (example("pd-vllm-gpu-nixl"), {"prefill": "engine-key-prefill", "decode": "engine-key-decode"}),
])  # fmt: skip
def test_the_engine_key_reaches_the_engine_by_reference(data, roles):
    objs = objects(data)
    secret = objs[0]
    assert secret["metadata"]["name"] == names.secret_name(data["name"])
    for role, key in roles.items():
        assert secret_values(secret)[key] == keys_for(roles)[role]
        assert env_of(engine(objs, role))["VLLM_API_KEY"] == {
            "name": "VLLM_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": names.secret_name(data["name"]), "key": key}},
        }


def test_docker_auth_becomes_an_image_pull_secret():
    auth = base64.b64encode(b"robot:pull-token-3b9e").decode()
    data = spec_with(dockerAuth=auth, containers=[{"image": "registry.example.com:5000/v:1"}])
    objs = objects(data)
    pull = next(o for o in objs if o["kind"] == "Secret" and o["metadata"]["name"] == "chat-pull")
    assert pull["type"] == "kubernetes.io/dockerconfigjson"
    config = json.loads(base64.b64decode(pull["data"][".dockerconfigjson"]))
    assert config == {"auths": {"registry.example.com:5000": {"auth": auth}}}
    assert pod(objs)["imagePullSecrets"] == [{"name": "chat-pull"}]
    assert auth not in json.dumps(deployment(objs))
    assert "imagePullSecrets" not in pod(objects(BASE))


# ---- generated files and staging -----------------------------------------------------------


def test_rank_tables_are_one_config_map_mounted_as_the_folder_the_engine_reads():
    data = example("pd-vllm-ascend-ranktable")
    objs = objects(data)
    name = f"{data['name']}-ranktable"
    (tables,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name]
    assert tables["metadata"]["labels"] == names.labels(data["name"])
    assert tables["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
    # No pods seen yet: an empty global table, initializing.
    assert list(tables["data"]) == ["global.json"]
    table = json.loads(tables["data"]["global.json"])
    assert (table["version"], table["status"]) == ("1.0", "initializing")
    for role in ("prefill", "decode"):
        container = engine(objs, role)
        variables = env_of(container)
        assert variables["GLOBAL_RANK_TABLE_FILE_PATH"]["value"] == (
            "/etc/wharf/ranktable/global.json"
        )
        # Each pod's own local table, by its name (the kubelet expands the variable).
        assert variables["RANK_TABLE_FILE_PATH"]["value"] == (
            "/etc/wharf/ranktable/$(WHARF_POD_NAME).json"
        )
        assert container["env"][1] == {
            "name": "WHARF_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
        }  # fmt: skip
        # The whole folder, no subPath: the kubelet brings the ConfigMap's updates to the pod.
        mount, found = volume(objs, "/etc/wharf/ranktable", role)
        assert found["configMap"] == {"name": name}
        assert mount == {"name": "rank-tables", "mountPath": "/etc/wharf/ranktable",
                         "readOnly": True}  # fmt: skip
        (waiter,) = pod(objs, role)["initContainers"]
        assert waiter["name"] == "rank-tables" and waiter["image"] == SETTINGS.stager_image
        assert waiter["args"] == ["python", "-m", "workers.nodes.rank_tables", "--folder",
                                  "/etc/wharf/ranktable", "--pod", "$(WHARF_POD_NAME)"]  # fmt: skip
        assert waiter["volumeMounts"] == [mount]
        assert {e["name"] for e in waiter["env"]} == {"WHARF_POD_IP", "WHARF_POD_NAME"}


def test_rank_tables_as_the_reconcile_pass_wrote_them_are_applied_as_given():
    data = example("pd-vllm-ascend-ranktable")
    spec = parse_spec(data)
    counts = replicas(spec)
    given = {"global.json": '{"status": "completed"}', "chat-prefill-7d9-x2k.json": "{}"}
    objs = render(spec.name, spec, 1, counts, SETTINGS, OWNER, keys_for(counts), given)
    (tables,) = [o for o in objs if o["metadata"]["name"] == f"{data['name']}-ranktable"]
    assert tables["data"] == given


def test_no_rank_tables_config_map_without_rank_tables():
    objs = objects(example("pd-vllm-ascend-mooncake"))
    assert all(o["kind"] != "ConfigMap" for o in objs)
    assert "initContainers" not in pod(objs, "prefill")


def test_an_object_storage_model_is_staged_by_an_init_container():
    settings = KubeSettings(stager_image="registry.local/wharf:1.4", storage_secret="oss-keys")
    objs = objects(example("vllm-oss-model"), settings)
    (stager,) = pod(objs)["initContainers"]
    assert stager["name"] == "stage-0" and stager["image"] == "registry.local/wharf:1.4"
    assert stager["args"] == ["python", "-m", "workers.models.stage", "--into", "/staged/0",
                              "oss://examplebucket/qwen2-7b/"]  # fmt: skip
    assert stager["volumeMounts"] == [{"name": "staged", "mountPath": "/staged"}]
    assert stager["envFrom"] == [{"secretRef": {"name": "oss-keys"}}]
    assert "env" not in stager  # no credentials in the spec: the operator's Secret has them
    target = "/models/oss/examplebucket/qwen2-7b"
    mount, found = volume(objs, target)
    assert found == {"name": "staged", "emptyDir": {}}
    assert mount == {"name": "staged", "mountPath": target, "readOnly": True, "subPath": "0"}
    assert engine(objs)["args"][engine(objs)["args"].index("--model") + 1] == target


def test_each_source_is_staged_once_with_the_spec_entrys_endpoint_and_keys():
    store = {"path": "oss://bk/m/", "endpoint": "oss-cn-hangzhou.aliyuncs.com",
             "access_key_id": ACCESS_ID, "access_key_secret": ACCESS_SECRET}  # fmt: skip
    data = spec_with(llm={"model": "oss://bk/m/", "speculative": {
        "model": "s3://dr/draft/", "method": "draft_model"}},
        storage=[{"mount_path": "/extra", "oss": store}])  # fmt: skip
    objs = objects(data)
    first, second = pod(objs)["initContainers"]
    assert first["args"][3:] == ["--into", "/staged/0", "--endpoint",
                                 "oss-cn-hangzhou.aliyuncs.com", "oss://bk/m/"]  # fmt: skip
    assert first["env"] == [
        {"name": f"WHARF_OSS_ACCESS_KEY_{part.upper()}", "valueFrom": {"secretKeyRef": {
            "name": "chat-secrets", "key": f"stage-0-access-key-{part}"}}}
        for part in ("id", "secret")
    ]  # fmt: skip
    assert second["args"][3:] == ["--into", "/staged/1", "s3://dr/draft/"]
    assert secret_values(objs[0])["stage-0-access-key-secret"] == ACCESS_SECRET
    assert volume(objs, "/extra")[0]["subPath"] == "0"
    assert volume(objs, "/models/oss/bk/m")[0]["subPath"] == "0"  # the same folder, twice
    assert volume(objs, "/models/s3/dr/draft")[0]["subPath"] == "1"


def test_a_hub_model_is_staged_at_its_versions_commit_with_the_token_kept_from_the_engine():
    commit = "3" * 40
    settings = KubeSettings(hub_endpoints=(("hf", "https://hf-mirror.example"),))
    data = spec_with(llm={"model": "hf://Qwen/Qwen2.5-0.5B@main", "hub_token": "hf_kube_secret"})
    spec = parse_spec(data)
    objs = render(spec.name, spec, 1, {"": 1}, settings, OWNER, keys_for({"": 1}),
                  hub_commits={"hf://Qwen/Qwen2.5-0.5B@main": commit})  # fmt: skip
    (stager,) = pod(objs)["initContainers"]
    assert stager["args"][3:] == ["--into", "/staged/0", "--endpoint", "https://hf-mirror.example",
                                  "--commit", commit, "hf://Qwen/Qwen2.5-0.5B@main"]  # fmt: skip
    assert stager["env"] == [{"name": "WHARF_HUB_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": "chat-secrets", "key": "hub-token"}}}]  # fmt: skip
    assert secret_values(objs[0])["hub-token"] == "hf_kube_secret"
    target = "/models/hf/Qwen/Qwen2.5-0.5B@main"
    assert engine(objs)["args"][engine(objs)["args"].index("--model") + 1] == target
    assert volume(objs, target)[0]["subPath"] == "0"
    # The engine gets neither the token nor a reference to it.
    assert "hf_kube_secret" not in json.dumps(deployment(objs))
    assert "hub-token" not in json.dumps(engine(objs))
    for version in VERSIONS:
        kubernetes_validate.validate(deployment(objs), version, strict=True)
    # Without a token, no Secret entry and no variable; without a recorded commit, no --commit.
    data["llm"].pop("hub_token")
    (plain,) = pod(objects(data))["initContainers"]
    assert "env" not in plain and "--commit" not in plain["args"]
    assert "hub-token" not in secret_values(objects(data)[0])
