"""Instances across hosts on Kubernetes (contracts.kube.lws, through contracts.kube.manifests):
a spec with unit.size > 1 renders a LeaderWorkerSet per role and a Service of each role's
leaders instead of Deployments; the objects are checked against the LeaderWorkerSet CRD's
published schema (tests/data, kubernetes-sigs/lws v0.7.0), strictly (no field it does not
know), their pods and Services against Kubernetes' own. Pure: no cluster (the CRD-missing
path against the fake API server: tests/kube/test_kube_lws_cluster.py)."""

from __future__ import annotations

import copy
import gzip
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from contracts.kube import lws, names
from contracts.kube.manifests import ManifestError, render
from contracts.spec import parse_spec
from contracts.spec_facts import replicas
from tests.kube_manifest_support import OWNER, SETTINGS, VERSIONS, env_of, keys_for

CRD = Path(__file__).parent / "data" / "leaderworkerset.x-k8s.io_leaderworkersets.v0.7.0.yaml.gz"
VLLM = {"name": "r1", "unit": {"size": 2}, "metadata": {"gpu": 8, "instance": 3},
        "llm": {"engine": "vllm", "model": "/models/r1", "tensor_parallel_size": 8,
                "pipeline_parallel_size": 2}}  # fmt: skip
SGLANG = {"name": "big", "unit": {"size": 4}, "metadata": {"gpu": 8},
          "llm": {"engine": "sglang", "model": "/models/big", "tensor_parallel_size": 8,
                  "pipeline_parallel_size": 4}}  # fmt: skip
PD = {"name": "pd", "unit": {"size": 2},
      "llm": {"engine": "vllm", "model": "/models/pd", "pipeline_parallel_size": 2,
              "pd": {"prefill": {"gpu": 4, "tensor_parallel_size": 4, "instance": 2},
                     "decode": {"gpu": 4, "tensor_parallel_size": 4},
                     "kv_connector": "NixlConnector"}}}  # fmt: skip
ASCEND_PD = {"name": "pd-npu", "unit": {"size": 2},
             "llm": {"engine": "vllm-ascend", "model": "/models/pd",
                     "pd": {"prefill": {"npu": 8, "tensor_parallel_size": 16},
                            "decode": {"npu": 8, "tensor_parallel_size": 16},
                            "kv_connector": "MooncakeConnectorV1",
                            "rank_table": True}}}  # fmt: skip


def strict(schema: object) -> object:
    """The schema with every object closed (`additionalProperties: false` wherever it lists
    properties and leaves others open neither way): the API server's strict field validation,
    which refuses an unknown field rather than dropping it."""
    if isinstance(schema, dict):
        out = {key: strict(value) for key, value in schema.items()}
        open_ = "additionalProperties" in out or out.get("x-kubernetes-preserve-unknown-fields")
        if "properties" in out and not open_:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(value) for value in schema]
    return schema


@cache
def validator() -> jsonschema.protocols.Validator:
    text = gzip.decompress(CRD.read_bytes()).decode()
    crd = yaml.safe_load(text)
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == lws.VERSION]
    assert crd["spec"]["group"] == lws.GROUP and crd["spec"]["names"]["kind"] == lws.KIND
    return jsonschema.Draft7Validator(strict(served["schema"]["openAPIV3Schema"]))


def objects(data: dict) -> list[dict]:
    spec = parse_spec(data)
    counts = replicas(spec)
    return render(spec.name, spec, 1, counts, SETTINGS, OWNER, keys_for(counts))


def of_kind(objs: list[dict], kind: str) -> dict[str, dict]:
    """The objects of `kind` by role."""
    return {o["metadata"]["labels"][names.LABEL_ROLE]: o for o in objs if o["kind"] == kind}


def templates(lws_object: dict) -> tuple[dict, dict]:
    group = lws_object["spec"]["leaderWorkerTemplate"]
    return group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]


def args_of(pod: dict) -> list[str]:
    (engine,) = [c for c in pod["containers"] if c["name"] == "engine"]
    return engine["command"] + engine["args"]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize(
    "data", [VLLM, SGLANG, PD, ASCEND_PD], ids=["vllm", "sglang", "pd", "pd-ascend-rank-tables"]
)
def test_a_spec_across_hosts_renders_objects_the_crd_and_kubernetes_accept(data):
    rendered = objects(data)
    kinds = [o["kind"] for o in rendered]
    roles = replicas(parse_spec(data))
    assert "Deployment" not in kinds
    assert kinds.count(lws.KIND) == kinds.count("Service") == len(roles)
    for obj in rendered:
        if obj["kind"] == lws.KIND:
            validator().validate(obj)
            for pod in templates(obj):  # the pods as Kubernetes' own schema has them
                pod_object = {"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": "p"}, "spec": pod}  # fmt: skip
                kubernetes_validate.validate(pod_object, VERSIONS[0], strict=True)
        else:
            kubernetes_validate.validate(obj, VERSIONS[0], strict=True)


def test_the_schema_check_refuses_what_the_crd_does_not_know():
    good = of_kind(objects(VLLM), lws.KIND)[""]
    validator().validate(good)
    typo = copy.deepcopy(good)
    typo["spec"]["leaderWorkerTemplate"]["sizes"] = 2  # unknown field
    with pytest.raises(jsonschema.ValidationError):
        validator().validate(typo)
    wrong = copy.deepcopy(good)
    wrong["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"  # not in the enum
    with pytest.raises(jsonschema.ValidationError):
        validator().validate(wrong)
    bad_port = copy.deepcopy(good)
    leader, _ = templates(bad_port)
    leader["containers"][0]["ports"] = [{"containerPort": "8000"}]  # a string, not a number
    with pytest.raises(jsonschema.ValidationError):
        validator().validate(bad_port)


def test_vllm_groups_hold_the_gang_the_leader_serving_and_the_workers_ranked_by_lws():
    found = of_kind(objects(VLLM), lws.KIND)[""]
    assert found["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert found["metadata"]["name"] == names.deployment_name("r1")
    spec = found["spec"]
    assert spec["replicas"] == 3  # instances
    group = spec["leaderWorkerTemplate"]
    assert (group["size"], group["restartPolicy"]) == (2, "RecreateGroupOnPodRestart")
    leader, worker = templates(found)
    for pod in (leader, worker):
        (engine,) = [c for c in pod["containers"] if c["name"] == "engine"]
        assert engine["resources"]["limits"]["nvidia.com/gpu"] == "8"  # cards per machine
        assert env_of(engine)["VLLM_HOST_IP"]["value"] == "$(WHARF_POD_IP)"
        args = args_of(pod)
        assert args[:4] == ["python", "-m", "vllm.entrypoints.cli.main", "serve"]
        assert flag(args, "--nnodes") == "2"
        assert flag(args, "--master-addr") == "$(LWS_LEADER_ADDRESS)"
        assert flag(args, "--master-port") == str(lws.RENDEZVOUS_PORT)
        assert flag(args, "--pipeline-parallel-size") == "2"
    assert flag(args_of(leader), "--node-rank") == "0"
    assert "--headless" not in args_of(leader)
    assert flag(args_of(worker), "--node-rank") == "$(LWS_WORKER_INDEX)"
    assert "--headless" in args_of(worker)
    # The leader serves behind its front, probed; the workers serve nothing.
    assert [c["name"] for c in leader["containers"]] == ["engine", "front"]
    assert "readinessProbe" in leader["containers"][0]
    assert [c["name"] for c in worker["containers"]] == ["engine"]
    assert not {"readinessProbe", "startupProbe", "livenessProbe"} & set(worker["containers"][0])
    labels = group["leaderTemplate"]["metadata"]["labels"]
    assert labels == names.labels("r1", "", parse_spec(VLLM).spec_hash())


def test_sglang_members_meet_at_the_leaders_address_with_their_lws_rank():
    leader, worker = templates(of_kind(objects(SGLANG), lws.KIND)[""])
    assert of_kind(objects(SGLANG), lws.KIND)[""]["spec"]["leaderWorkerTemplate"]["size"] == 4
    for pod, rank in ((leader, "0"), (worker, "$(LWS_WORKER_INDEX)")):
        args = args_of(pod)
        assert flag(args, "--nnodes") == "4"
        assert flag(args, "--node-rank") == rank
        assert flag(args, "--dist-init-addr") == "$(LWS_LEADER_ADDRESS):29500"


def test_prefill_and_decode_each_get_their_own_leader_worker_set_and_service():
    rendered = objects(PD)
    sets, services = of_kind(rendered, lws.KIND), of_kind(rendered, "Service")
    assert set(sets) == set(services) == {"prefill", "decode"}
    assert sets["prefill"]["spec"]["replicas"] == 2
    assert sets["decode"]["spec"]["replicas"] == 1
    assert {s["metadata"]["name"] for s in sets.values()} == {"pd-prefill", "pd-decode"}
    for role, found in sets.items():
        leader, worker = templates(found)
        assert flag(args_of(worker), "--node-rank") == "$(LWS_WORKER_INDEX)"
        assert '"kv_role"' in flag(args_of(leader), "--kv-transfer-config")
        assert found["spec"]["leaderWorkerTemplate"]["size"] == 2
        assert found["metadata"]["labels"][names.LABEL_ROLE] == role


def test_the_service_selects_each_roles_leaders_only_on_their_fronts():
    for role, service in of_kind(objects(PD), "Service").items():
        assert service["metadata"]["name"] == f"pd-{role}-leaders"
        assert service["metadata"]["name"] == lws.leader_service_name("pd", role)
        assert service["spec"]["selector"] == {
            **names.labels("pd", role),
            "leaderworkerset.sigs.k8s.io/worker-index": "0",
        }
        assert service["spec"]["ports"] == [
            {"name": "http", "port": 18999, "targetPort": "http", "protocol": "TCP"}
        ]


def test_a_spec_on_one_host_still_renders_deployments():
    one = {**VLLM, "unit": {"size": 1}, "llm": {"engine": "vllm", "model": "/models/r1"}}
    kinds = [o["kind"] for o in objects(one)]
    assert "Deployment" in kinds and lws.KIND not in kinds and "Service" not in kinds


def test_a_canary_of_a_spec_across_hosts_cannot_run_on_the_cluster():
    spec = parse_spec(VLLM)
    counts = replicas(spec)
    with pytest.raises(ManifestError) as caught:
        render(spec.name, spec, 1, counts, SETTINGS, OWNER, keys_for(counts), track="canary")
    assert caught.value.field == "unit.size"


@pytest.mark.parametrize(
    ("labels", "serves"),
    [
        ({}, True),  # a Deployment's pod
        ({lws.LABEL_WORKER_INDEX: "0"}, True),  # a group's leader
        ({lws.LABEL_WORKER_INDEX: "1"}, False),
        ({lws.LABEL_WORKER_INDEX: "3"}, False),
    ],
)
def test_only_deployment_pods_and_group_leaders_are_routed(labels, serves):
    assert lws.serves({"metadata": {"labels": labels}}) is serves


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["serve", "--node-rank", "1", "--headless"],
         ["serve", "--node-rank", "$(LWS_WORKER_INDEX)", "--headless"]),
        (["--nnodes", "4", "--node-rank", "1", "--dist-init-addr", "a:1"],
         ["--nnodes", "4", "--node-rank", "$(LWS_WORKER_INDEX)", "--dist-init-addr", "a:1"]),
    ],
)  # fmt: skip
def test_a_workers_rank_is_the_kubelets_expansion_of_lws_worker_index(args, expected):
    assert lws.worker_args(args) == expected


def test_the_missing_crd_message_names_it_and_how_to_install_it():
    assert "leaderworkersets.leaderworkerset.x-k8s.io" in lws.NOT_INSTALLED
    assert "https://lws.sigs.k8s.io/docs/installation/" in lws.NOT_INSTALLED
    assert "components/leaderworkerset" in lws.NOT_INSTALLED
    assert (Path(__file__).parents[1] / "deploy/kubernetes/components/leaderworkerset").is_dir()


def test_the_crd_file_names_its_source_and_license():
    header = gzip.decompress(CRD.read_bytes()).decode().splitlines()[:3]
    assert "https://github.com/kubernetes-sigs/lws/blob/v0.7.0/" in header[0]
    assert "Apache-2.0" in header[1]


def test_the_lws_role_is_one_kubernetes_accepts_and_grants_what_the_runtime_calls():
    path = Path(__file__).parents[1] / "deploy/kubernetes/components/leaderworkerset/rbac.yaml"
    docs = list(yaml.safe_load_all(path.read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, VERSIONS[0], strict=True)
    (role,) = [d for d in docs if d["kind"] == "Role"]
    granted = {(g, r): set(rule["verbs"]) for rule in role["rules"]
               for g in rule["apiGroups"] for r in rule["resources"]}  # fmt: skip
    assert granted == {
        (lws.GROUP, lws.PLURAL): {"create", "patch", "list", "delete"},
        ("", "services"): {"create", "patch", "delete"},
    }


def test_the_component_adds_the_role_to_an_overlay_bound_to_the_worker(tmp_path):
    kube = Path(__file__).parents[1] / "deploy/kubernetes"
    # Kustomize takes only relative paths to other kustomizations.
    production = os.path.relpath(kube / "overlays/production", tmp_path)
    component = os.path.relpath(kube / "components/leaderworkerset", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [production], "components": [component]})
    )
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl not found: Kustomize comes with kubectl 1.27 or later"
    run = subprocess.run([kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    docs = [d for d in yaml.safe_load_all(run.stdout) if d]
    (binding,) = [d for d in docs if d["metadata"]["name"] == "wharf-worker-lws"
                  and d["kind"] == "RoleBinding"]  # fmt: skip
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    assert binding["subjects"][0]["name"] in accounts  # the worker the overlay runs
    assert binding["metadata"]["namespace"] == binding["subjects"][0]["namespace"]
    for doc in docs:
        kubernetes_validate.validate(doc, VERSIONS[0], strict=True)
