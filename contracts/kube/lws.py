"""An instance across hosts (unit.size N > 1) on Kubernetes: one LeaderWorkerSet
(`leaderworkerset.x-k8s.io/v1`, kubernetes-sigs/lws) per role instead of a Deployment, and a
Service of its leaders. Pure: no I/O.

- `replicas` is the role's instances; `leaderWorkerTemplate.size` is N, so every instance is a
  group of one leader pod and N - 1 worker pods, which the LWS controller creates, places
  and restarts together: `restartPolicy: RecreateGroupOnPodRestart` recreates the whole group
  when any of its pods restarts, so no member is left running alone.
- Each pod holds the spec's cards per machine (its role's in a prefill/decode service) as
  resource limits, as a Deployment's pod does (contracts.kube.pod_template).
- The leader runs member 0's command (contracts.engines.gang): it serves HTTP behind its front
  and has the readiness probe. The workers run the members' command, their rank the kubelet's
  expansion of `$(LWS_WORKER_INDEX)`, which LWS sets in every container of a group's pods
  (0 on the leader, 1..N-1 on the workers); they serve nothing, so they have no front and no
  probe. Every member finds the leader's rendezvous at `$(LWS_LEADER_ADDRESS)`, the leader
  pod's DNS name under the headless Service LWS makes, on RENDEZVOUS_PORT (each pod has its
  own IP, so the customary port never collides); a member's own address (VLLM_HOST_IP) is its
  pod IP.
- The leaders' Service selects the role's leader pods only (LWS labels each pod with its
  `worker-index`; the leader's is "0"): the gateway's one address for the role. The routing
  itself reads the leader pods (workers.kube.reconcile keeps the workers out of it).

A cluster without the CRD cannot run such a spec: workers.kube.reconcile says so, naming the
CRD and how to install it (NOT_INSTALLED), and applies nothing.
"""

from __future__ import annotations

from dataclasses import replace

from contracts.engine_front import front_port
from contracts.engines.gang import PREVIEW_PORT
from contracts.engines.plan import ContainerPlan, GangMember, Placement
from contracts.kube import names
from contracts.kube.front import FRONT, HTTP
from contracts.spec import ServiceSpec

GROUP = "leaderworkerset.x-k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "LeaderWorkerSet"
PLURAL = "leaderworkersets"
CRD = f"{PLURAL}.{GROUP}"
INSTALL = "https://lws.sigs.k8s.io/docs/installation/"
NOT_INSTALLED = (
    f"an instance across hosts runs as a {KIND} on Kubernetes, and the cluster has no {CRD} "
    "CustomResourceDefinition (or Wharf's worker may not list them): install "
    f"LeaderWorkerSet (v0.6 or later; {INSTALL}, e.g. "
    "`kubectl apply --server-side -f https://github.com/kubernetes-sigs/lws/releases/download/"
    "v0.7.0/manifests.yaml`) and grant Wharf's worker the Kustomize component "
    "deploy/kubernetes/components/leaderworkerset, or set unit.size to 1"
)
# The label LWS sets on every pod of a group: "0" on the leader.
LABEL_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
# And the set's name and the group's index (0 .. replicas - 1), also on every pod of a group.
LABEL_SET_NAME = "leaderworkerset.sigs.k8s.io/name"
LABEL_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
# The variables LWS sets in every container of a group's pods, which the kubelet expands.
WORKER_INDEX_ENV = "LWS_WORKER_INDEX"
LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
EXPANDED = (WORKER_INDEX_ENV, LEADER_ADDRESS_ENV)
RENDEZVOUS_PORT = PREVIEW_PORT
RANK_FLAG = "--node-rank"  # vLLM's and SGLang's (contracts.engines.gang)
PROBES = ("readinessProbe", "startupProbe", "livenessProbe")


def enabled(spec: ServiceSpec) -> bool:
    """Whether the spec's instances span hosts: LeaderWorkerSets, not Deployments."""
    return spec.unit_size() > 1


def members(spec: ServiceSpec, placement: Placement, pod_ip: str) -> tuple[Placement, Placement]:
    """The leader's placement and the workers' (rank 1 stands for every worker: their ranks
    are the kubelet's, worker_args), each member at its own pod IP (`pod_ip`, the kubelet's
    expansion of the downward API's variable)."""
    size, leader = spec.unit_size(), f"$({LEADER_ADDRESS_ENV})"
    return (
        replace(placement, gang=GangMember(0, size, leader, RENDEZVOUS_PORT, pod_ip)),
        replace(placement, gang=GangMember(1, size, leader, RENDEZVOUS_PORT, pod_ip)),
    )


def worker_args(args: list[str]) -> list[str]:
    """A worker's command with its rank from LWS: the value of --node-rank, as
    `$(LWS_WORKER_INDEX)`."""
    out = list(args)
    at = out.index(RANK_FLAG) + 1  # every multi-host engine's command has it
    out[at] = f"$({WORKER_INDEX_ENV})"
    return out


def worker_plan(plan: ContainerPlan) -> ContainerPlan:
    return replace(plan, args=worker_args(plan.args))


def worker_pod(pod: dict) -> dict:
    """A worker's pod from the one pod_template renders: no front (it serves nothing) and
    no probes (it listens on no port of its own until the group has met)."""
    containers = []
    for container in pod["containers"]:
        if container["name"] == FRONT:
            continue
        containers.append({k: v for k, v in container.items() if k not in PROBES})
    return {**pod, "containers": containers}


def leader_service_name(service: str, role: str = "") -> str:
    """The Service of a role's leaders (LWS names its own headless Service as the set)."""
    return f"{names.deployment_name(service, role)}-leaders"


def leader_worker_set(
    metadata: dict, spec: ServiceSpec, count: int, template_meta: dict, leader: dict,
    worker: dict,
) -> dict:  # fmt: skip
    """A role's LeaderWorkerSet: `count` groups of unit.size pods, the leader's pod spec and
    the workers'; rolled over as the spec's rolling strategy says, a group at a time."""
    surge, unavailable = spec.rolling_strategy.resolve(count)
    if not surge and not unavailable:  # as a Deployment's: never 0 and 0
        unavailable = 1
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "replicas": count,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": surge, "maxUnavailable": unavailable},
            },
            "leaderWorkerTemplate": {
                "size": spec.unit_size(),
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": template_meta, "spec": leader},
                "workerTemplate": {"metadata": template_meta, "spec": worker},
            },
        },
    }


def leader_service(metadata: dict, service: str, role: str, plan: ContainerPlan) -> dict:
    """The Service of a role's leaders: their fronts' `http` port."""
    selector = {**names.labels(service, role), LABEL_WORKER_INDEX: "0"}
    port = front_port(plan.port)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": HTTP, "port": port, "targetPort": HTTP, "protocol": "TCP"}],
        },
    }


def serves(pod: dict) -> bool:
    """Whether a pod is an instance the gateways route to: any pod of a Deployment, and the
    leader of a LeaderWorkerSet's group (its workers serve nothing)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_WORKER_INDEX, "0") == "0"
