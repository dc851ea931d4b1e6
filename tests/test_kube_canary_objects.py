"""A canary release's objects on Kubernetes and the pure rules around them (contracts.kube
with track "canary", workers.kube.canary): every example spec's canary renders objects that
Kubernetes' published schemas accept (strict), named and labelled apart from the stable ones
and reading only its own Secrets; which track a pod is routed on; when a promoted canary's
Deployments may go. The cycle against a cluster: tests/kube/test_kube_canary.py."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from contracts.canary import CANARY_TRACK
from contracts.kube import names
from contracts.kube.manifests import ManifestError, pull_secret_name, render
from contracts.spec import parse_spec
from contracts.spec_facts import replicas
from tests.kube_manifest_support import OWNER, SETTINGS, SPECS, VERSIONS, example, keys_for
from workers.kube import canary

CANARY = CANARY_TRACK
RANK_TABLES = {"pd-vllm-ascend-ranktable"}  # one version's pods in its tables: no canary


def canary_objects(data: dict) -> list[dict]:
    spec = parse_spec(data)
    counts = replicas(spec)
    return render(spec.name, spec, 1, counts, SETTINGS, OWNER, keys_for(counts), track=CANARY)


def refs(obj: object, found: set[str]) -> set[str]:
    """The names of the Secrets a pod spec reads (env, envFrom, volumes, pull secrets)."""
    if isinstance(obj, dict):
        for key in ("secretKeyRef", "secretRef"):
            if key in obj:
                found.add(obj[key]["name"])
        if isinstance(obj.get("secret"), dict):  # a volume's, or a projected volume's
            found.add(obj["secret"].get("secretName") or obj["secret"]["name"])
        for value in obj.values():
            refs(value, found)
    elif isinstance(obj, list):
        for value in obj:
            refs(value, found)
    return found


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "path", [p for p in SPECS if p.stem not in RANK_TABLES], ids=lambda path: path.stem
)
def test_every_example_specs_canary_renders_objects_kubernetes_accepts(path, version):
    data = json.loads(path.read_text())
    rendered = canary_objects(data)
    for obj in rendered:
        kubernetes_validate.validate(obj, version, strict=True)
        assert obj["metadata"]["labels"][names.LABEL_TRACK] == CANARY
    assert "NetworkPolicy" not in [o["kind"] for o in rendered]  # the stable one admits it
    for deployment in [o for o in rendered if o["kind"] == "Deployment"]:
        role = deployment["metadata"]["labels"][names.LABEL_ROLE]
        assert deployment["metadata"]["name"] == names.deployment_name(data["name"], role, CANARY)
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector == names.labels(data["name"], role, track=CANARY)
        template = deployment["spec"]["template"]["metadata"]["labels"]
        assert template[names.LABEL_TRACK] == CANARY
        assert refs(deployment, set()) == {names.secret_name(data["name"], CANARY)}


def test_a_canarys_objects_are_named_apart_from_the_stable_ones():
    assert names.deployment_name("chat", "", CANARY) == "chat-canary"
    assert names.deployment_name("chat", "decode", CANARY) == "chat-canary-decode"
    assert names.engine_key_name("chat", "decode", CANARY) == "k8s/chat-canary-decode"
    assert names.secret_name("chat", CANARY) == "chat-canary-secrets"
    assert pull_secret_name("chat", CANARY) == "chat-canary-pull"
    # the stable ones keep their names
    assert (names.deployment_name("chat"), names.secret_name("chat")) == ("chat", "chat-secrets")
    assert pull_secret_name("chat") == "chat-pull"


def test_a_canary_with_docker_auth_pulls_with_its_own_secret():
    data = {**example("vllm-gpu-qwen"), "dockerAuth": "cm9ib3Q6dG9rZW4="}
    rendered = canary_objects(data)
    secrets = {o["metadata"]["name"] for o in rendered if o["kind"] == "Secret"}
    pull = pull_secret_name(data["name"], CANARY)
    assert secrets == {names.secret_name(data["name"], CANARY), pull}
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": pull}]


def test_a_canary_of_a_spec_with_rank_tables_names_the_field():
    with pytest.raises(ManifestError) as raised:
        canary_objects(example("pd-vllm-ascend-ranktable"))
    assert raised.value.field == "llm.pd.rank_table"


@pytest.mark.parametrize(
    ("pod_track", "spec_hash", "active_hash", "expected"),
    [
        ("", "new", "", ("", False)),  # a stable pod
        ("", "old", "", ("", False)),  # a stable pod of the version it rolls away from
        ("", "old", "trial", ("", False)),
        (CANARY, "trial", "trial", (CANARY, False)),  # the active release's
        (CANARY, "new", "", ("", False)),  # promoted: the service's version now
        (CANARY, "trial", "", (CANARY, True)),  # rolled back or aborted
        (CANARY, "older", "trial", (CANARY, True)),  # an earlier release's
    ],
)
def test_the_track_a_pod_is_routed_on(pod_track, spec_hash, active_hash, expected):
    assert canary.track(pod_track, spec_hash, "new", active_hash) == expected


def deployment(name="chat", spec_hash="new", wanted=2, generation=2, track="", **status):
    """A Deployment as the cluster shows it: `wanted` replicas, its status 2 of 2 unless
    `status` says otherwise."""
    counts = {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}
    return {
        "metadata": {
            "name": name,
            "labels": names.labels("chat", "", spec_hash, track),
            "generation": generation,
        },
        "spec": {"replicas": wanted},
        "status": {**counts, **status},
    }


NONE = {"replicas": 0, "updatedReplicas": 0, "availableReplicas": 0}


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        (deployment(), True),
        (deployment(spec_hash="old"), False),  # not yet applied with the new spec
        (deployment(generation=3), False),  # the controller has not seen the newest spec
        (deployment(updatedReplicas=1), False),  # rolling
        (deployment(replicas=3), False),  # an old pod not yet terminating
        (deployment(availableReplicas=1), False),  # a new pod not ready
        (deployment(wanted=0, **NONE), True),  # stopped
    ],
)
def test_a_deployment_has_rolled_out_when_every_replica_is_new_and_available(found, expected):
    assert canary.rolled_out(found, "new") is expected


def test_a_promoted_canarys_deployment_stays_until_the_stable_one_has_rolled_out():
    trial = deployment("chat-canary", track=CANARY)
    rolling = [deployment(availableReplicas=1), trial]
    assert canary.kept(rolling, {"chat"}, "new") == {"chat-canary"}
    assert canary.kept([deployment(), trial], {"chat"}, "new") == set()
    rolled_back = deployment("chat-canary", spec_hash="trial", track=CANARY)
    assert canary.kept([deployment(availableReplicas=1), rolled_back], {"chat"}, "new") == set()


@pytest.mark.parametrize(
    ("trial", "stable", "expected"),
    [
        ({"": 1}, {"": 3}, {"": 3}),  # as many as the stable side
        ({"": 1}, {"": 0}, {"": 0}),
        ({"prefill": 1, "decode": 2}, {"prefill": 2, "decode": 4}, {"prefill": 2, "decode": 4}),
        ({"prefill": 1, "decode": 1}, {"": 2}, {"prefill": 1, "decode": 1}),  # roles of its own
    ],
)
def test_a_canary_has_as_many_pods_per_role_as_the_stable_side(trial, stable, expected):
    assert canary.replicas(trial, stable) == expected
