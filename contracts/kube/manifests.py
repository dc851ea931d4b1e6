"""The objects a service is on Kubernetes, rendered from its spec: pure functions, no I/O.

`root` is the service's root ConfigMap, which owns the rest; `render` the rest, in the order
they are applied: the Secret (engine keys, object-storage credentials from the spec), the
image pull Secret where the spec has dockerAuth, the Ascend rank tables' ConfigMap where it
has them (contracts.kube.rank_tables), then per role ("" for a plain service, "prefill" and
"decode") its Deployment (contracts.kube.pod_template builds the pod), or, for a spec whose
instances span hosts (unit.size > 1), its LeaderWorkerSet and the Service of its leaders
(contracts.kube.lws). A value of a Secret
never appears in any other object: pods read secrets by reference.

Names, labels and settings: contracts.kube.names. Deployments are applied server-side by field
manager `wharf`; a Deployment's selector has no spec hash (a selector is immutable), its pod
template does, and its pod template changes only when what runs changes: the version number
is an annotation of the objects, not of their pods, so a new version that only scales rolls
nothing.

A canary release's version (`track` "canary") renders as objects of its own beside the stable
ones: its Secret and pull Secret, and its Deployments, each named and labelled with the track
(contracts.kube.names), its pods' engine keys their Deployments' own. The stable NetworkPolicy
admits its pods already (it selects the service's pods); rank tables describe one version's
pods, so a spec with them has no canary on a cluster. A stable Deployment's selector, immutable
since it was made, matches its canary's pods too: the Deployment and ReplicaSet controllers
keep each pod with its own owner (ownerReferences, and the pod-template-hash that the track
label makes differ), as with any Deployments whose selectors overlap.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, replace

from contracts.engines import render as render_plan
from contracts.grants import registry_host
from contracts.kube import lws, names, rank_tables
from contracts.kube.front import ANNOTATION_TLS_DOMAIN, METRICS_TOKEN, tls_domain
from contracts.kube.names import KubeSettings
from contracts.kube.pod_template import (
    HUB_TOKEN,
    POD_IP,
    ManifestError,
    PodNames,
    StagedSource,
    credential_key,
    pod_placement,
    pod_spec,
    staged_sources,
)
from contracts.kube.sidecars import sidecar_containers
from contracts.spec import ServiceSpec

__all__ = ["ManifestError", "Owner", "engine_key_entry", "pull_secret_name", "render", "root"]

REVISIONS = 3  # old ReplicaSets a Deployment keeps (Wharf's own versions are its rollbacks)
DOCKER_HUB = "https://index.docker.io/v1/"


@dataclass(frozen=True)
class Owner:
    """The object that owns every other of a service: its root ConfigMap, as applied."""

    name: str
    uid: str


def root(service: str, version: int, spec_hash: str, namespace: str = "") -> dict:
    """The service's root ConfigMap: which version of which service the cluster runs. In
    `namespace`, or in whichever the apply names when ""."""
    meta: dict = {
        "name": names.root_name(service),
        "labels": names.labels(service),
        "annotations": _annotations(service, version),
    }
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {"service": service, "version": str(version), "spec-hash": spec_hash},
    }


def render(
    service: str,
    spec: ServiceSpec,
    version: int,
    replicas: dict[str, int],
    settings: KubeSettings,
    owner: Owner,
    engine_keys: dict[str, str],
    tables: dict[str, str] | None = None,
    hub_commits: dict[str, str] | None = None,
    track: str = "",
) -> list[dict]:
    """Every object of `service` but its root, for `replicas` pods per role (each role's
    `engine_keys` entry is its pods' engine key; `tables` the rank tables' data as the pods
    are, where the spec has them; `hub_commits` the commits its version records for its hub
    models); of its canary release's version with `track` "canary". Raises ManifestError for
    what the cluster cannot run."""
    spec_hash = spec.spec_hash()
    if track and rank_tables.enabled(spec):
        raise ManifestError("llm.pd.rank_table", "rank tables list one version's pods: a "
                            "canary of a spec with them cannot run on the cluster")  # fmt: skip
    if track and lws.enabled(spec):
        raise ManifestError("unit.size", "an instance across hosts runs as a LeaderWorkerSet, "
                            "which has no canary on the cluster yet")  # fmt: skip
    staged = staged_sources(spec, hub_commits)
    placements = {
        role: replace(
            pod_placement(spec, role, staged, engine_keys[role], settings.limits),
            otlp_endpoint=settings.otlp_endpoint,
        )
        for role in replicas
    }
    plans = {role: render_plan(spec, placement) for role, placement in placements.items()}
    pull = pull_secret_name(service, track) if spec.dockerAuth else ""
    meta = _Meta(service, version, settings, owner, track)
    objects = [
        _secret(meta, engine_keys, replicas, staged, spec.llm.hub_token if spec.llm else None)
    ]
    if spec.dockerAuth:
        objects.append(_pull_secret(meta, pull, spec.dockerAuth, plans.values()))
    files = rank_tables.config_map_name(service)
    if rank_tables.enabled(spec):
        if tables is None:  # no pods seen yet
            tables = rank_tables.tables((), spec_hash, [r for r, n in replicas.items() if n]).data
        objects.append(_rank_tables(meta, files, tables))
    if not track:
        objects.append(_network_policy(meta))
    for role, count in replicas.items():
        refs = PodNames(names.secret_name(service, track), engine_key_entry(role), files, pull)
        if lws.enabled(spec):
            objects += _leader_worker_set(meta, spec, role, count, placements[role], refs, staged)
            continue
        pod = pod_spec(spec, plans[role], placements[role], settings, staged, refs)
        pod["containers"] += sidecar_containers(spec, plans[role].sidecars, pod, settings)
        objects.append(_deployment(meta, spec, role, count, spec_hash, pod))
    return objects


def engine_key_entry(role: str) -> str:
    """The key of a role's engine key in the service's Secret."""
    return f"engine-key-{role}" if role else "engine-key"


def pull_secret_name(service: str, track: str = "") -> str:
    """The Secret the service's pods (its canary's, with `track`) pull their image with
    (dockerAuth)."""
    return "-".join(part for part in (names.slug(service), track, "pull") if part)


def _annotations(service: str, version: int) -> dict[str, str]:
    return {names.ANNOTATION_SERVICE: service, names.ANNOTATION_VERSION: str(version)}


@dataclass(frozen=True)
class _Meta:
    service: str
    version: int
    settings: KubeSettings
    owner: Owner
    track: str = ""

    def __call__(self, name: str, labels: dict) -> dict:
        return {
            "name": name,
            "namespace": self.settings.namespace,
            "labels": labels,
            "annotations": _annotations(self.service, self.version),
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": self.owner.name,
                    "uid": self.owner.uid,
                    "blockOwnerDeletion": True,
                    "controller": False,
                }
            ],
        }


def _secret(
    meta: _Meta,
    engine_keys: dict[str, str],
    replicas: dict[str, int],
    staged: list[StagedSource],
    hub_token: str | None,
) -> dict:
    data = {engine_key_entry(role): engine_keys[role] for role in replicas}
    if meta.settings.metrics_token:  # read by the engines' fronts (contracts.kube.front)
        data[METRICS_TOKEN] = meta.settings.metrics_token
    if hub_token:  # read by the init containers that stage hub models, never by an engine
        data[HUB_TOKEN] = hub_token
    for n, source in enumerate(staged):
        if source.access_key_id and source.access_key_secret:
            data[credential_key(n, "id")] = source.access_key_id
            data[credential_key(n, "secret")] = source.access_key_secret
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(
            names.secret_name(meta.service, meta.track),
            names.labels(meta.service, track=meta.track),
        ),
        "type": "Opaque",
        # `data`, not `stringData`: under server-side apply a key dropped from `stringData`
        # would stay in `data`; applied as `data`, a key the spec no longer has goes.
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }


def registry(image: str) -> str:
    """The registry an image reference pulls from, as Docker's config names it."""
    return registry_host(image) or DOCKER_HUB


def _pull_secret(meta: _Meta, name: str, auth: str, plans) -> dict:
    """dockerAuth (base64 of user:password) for the registries of the service's images."""
    images = [image for plan in plans for image in (plan.image, *(c.image for c in plan.sidecars))]
    auths = {registry(image): {"auth": auth} for image in images}
    config = json.dumps({"auths": auths}, sort_keys=True).encode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(name, names.labels(meta.service, track=meta.track)),
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(config).decode()},
    }


def _rank_tables(meta: _Meta, name: str, data: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(name, names.labels(meta.service)),
        "data": data,
    }


# Who calls engines (the `app.kubernetes.io/name` labels of deploy/kubernetes/base/gateway.yaml
# and worker.yaml): the gateway relays callers, the worker probes, scrapes and loads adapters.
ENGINE_CALLERS = ("wharf-gateway", "wharf-worker")


def _network_policy(meta: _Meta) -> dict:
    """Engines only through the gateway: the service's pods take connections from Wharf's
    gateway and worker, and from each other (a prefill/decode service's KV transfer), never
    from another service's pods. deploy/kubernetes/base/networkpolicy.yaml denies everything
    else to Wharf's pods; NetworkPolicies add up, so an operator may allow more (a Prometheus)."""
    own = {names.LABEL_SERVICE: names.slug(meta.service)}
    callers = [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": name}}}
               for name in ENGINE_CALLERS]  # fmt: skip
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta(names.network_policy_name(meta.service), names.labels(meta.service)),
        "spec": {
            "podSelector": {"matchLabels": own},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [*callers, {"podSelector": {"matchLabels": own}}]}],
        },
    }


def _leader_worker_set(
    meta: _Meta, spec: ServiceSpec, role: str, count: int, placement, refs: PodNames,
    staged: list[StagedSource],
) -> list[dict]:  # fmt: skip
    """A role of a spec whose instances span hosts: its LeaderWorkerSet and the Service of
    its leaders (contracts.kube.lws)."""
    settings, service, spec_hash = meta.settings, meta.service, spec.spec_hash()
    leading, working = lws.members(spec, placement, POD_IP)
    leader_plan = render_plan(spec, leading)
    worker_plan = lws.worker_plan(render_plan(spec, working))
    leader = pod_spec(spec, leader_plan, leading, settings, staged, refs)
    leader["containers"] += sidecar_containers(spec, leader_plan.sidecars, leader, settings)
    worker = lws.worker_pod(pod_spec(spec, worker_plan, working, settings, staged, refs))
    labels = names.labels(service, role, spec_hash)
    name = names.deployment_name(service, role)
    return [
        lws.leader_worker_set(meta(name, labels), spec, count, _template_meta(meta, labels),
                              leader, worker),
        lws.leader_service(meta(lws.leader_service_name(service, role),
                                names.labels(service, role)), service, role, leader_plan),
    ]  # fmt: skip


def _template_meta(meta: _Meta, labels: dict) -> dict:
    annotations = {names.ANNOTATION_SERVICE: meta.service}
    if domain := tls_domain(meta.settings):  # its pods' fronts serve TLS: their name
        annotations[ANNOTATION_TLS_DOMAIN] = domain
    return {"labels": dict(labels), "annotations": annotations}


def _deployment(
    meta: _Meta, spec: ServiceSpec, role: str, count: int, spec_hash: str, pod: dict
) -> dict:
    service, track = meta.service, meta.track
    surge, unavailable = spec.rolling_strategy.resolve(count)
    if not surge and not unavailable:  # no pods: Kubernetes refuses a strategy of 0 and 0
        surge = 1
    labels = names.labels(service, role, spec_hash, track)
    template_meta = _template_meta(meta, labels)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(names.deployment_name(service, role, track), labels),
        "spec": {
            "replicas": count,
            "selector": {"matchLabels": names.labels(service, role, track=track)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable},
            },
            "progressDeadlineSeconds": meta.settings.progress_deadline_s,
            "revisionHistoryLimit": REVISIONS,
            "template": {"metadata": template_meta, "spec": pod},
        },
    }
