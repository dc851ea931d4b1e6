"""One reconcile pass of a service on Kubernetes (WHARF_RUNTIME=kubernetes).

Wharf's own scheduler and node agents step aside: the pass applies what the service's current
version renders (contracts.kube.manifests: a root ConfigMap owning a Secret and a Deployment per
role, or, for instances across hosts, a LeaderWorkerSet per role: contracts.kube.lws) and hands
placement, restarts and rolling updates to the cluster, and beside it what an active canary
release's version renders (workers.kube.canary). It then reads back what the cluster did: each
pod (of a LeaderWorkerSet, each group's leader) becomes an instance row (workers.kube.observe),
which the routing snapshot serves as it serves any instance; the scheduler's and the kubelet's
warnings become service events; a rollout past its progress deadline pauses the service's
status. Deleting a service deletes its root, and the garbage collector removes the rest.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import replace

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from contracts import spec_facts
from contracts.engine_keys import engine_key
from contracts.kube import lws, manifests, names, rank_tables
from contracts.spec import ServiceSpec, SpecError
from controlplane.services.choices import DesiredState, InstanceState
from controlplane.services.events import record, record_once
from controlplane.services.models import Instance, Service
from controlplane.services.routing import publish_snapshot
from workers.kube import canary, observe
from workers.kube.api import Cluster
from workers.models import provisioning
from workers.models.hub import HubUnreachable
from workers.models.hub_pins import VersionPins
from workers.runtimes.base import InstanceError
from workers.scheduling import planning
from workers.scheduling.scheduler import finish_deletion, save_status

log = logging.getLogger(__name__)
RUNTIME = "kubernetes"
MOVING = 2.0  # seconds to the next pass while pods start, roll or terminate
HUB_RETRY = 30.0  # seconds to the next pass while a hub cannot be reached


def reconcile(name: str, cluster: Cluster, kube: names.KubeSettings) -> float | None:
    """One pass; seconds until the next one, or None once the service has settled."""
    service = Service.objects.filter(name=name).first()
    if service is None:
        return None
    if service.desired_state == DesiredState.DELETED:
        return _delete(service, cluster)
    try:
        spec: ServiceSpec | None = service.parsed_spec()
    except SpecError as exc:  # stored before a rule tightened: run nothing
        spec, error = None, f"invalid spec: {exc}"
    else:
        error = ""
    replicas: dict[str, int] = {}
    wanted: set[str] = set()  # the Deployments it has now; others are of roles gone
    sets: set[str] = set()  # its LeaderWorkerSets now (unit.size > 1)
    trial: set[str] = set()  # those of its active canary release
    tables = ""  # what the rank tables wait for
    if spec is not None:
        replicas = spec_facts.replicas(spec, service.autoscale)
        if service.desired_state != DesiredState.RUNNING:
            replicas = dict.fromkeys(replicas, 0)
        try:
            wanted, trial, tables, sets = _apply(service, spec, replicas, cluster, kube)
        except HubUnreachable as exc:  # may pass: what runs stays, the next pass tries again
            record_once(service, "HubUnreachable", str(exc))
            return HUB_RETRY
        except manifests.ManifestError as exc:  # the spec asks what the cluster cannot give
            spec, error = None, str(exc)
            record_once(service, "CannotRunOnCluster", error)
    target = spec.spec_hash() if spec else ""
    rollouts = _prune(service, cluster, wanted | trial, target)
    _prune_sets(service, cluster, sets)
    pods = cluster.pods(names.selector(service.name))
    active = canary.active(service) if trial else None
    serving = [pod for pod in pods if lws.serves(pod)]  # a group's workers serve nothing
    newly_draining = _sync_instances(service, serving, target, active.spec_hash if active else "")
    _record_warnings(service, cluster, pods)
    settled = _write_status(service, spec, replicas, rollouts, error, tables)
    publish_snapshot(force=newly_draining)
    return None if settled else MOVING


def _prune(service: Service, cluster: Cluster, wanted: set[str], target: str) -> list:
    """Delete the service's Deployments not `wanted` (of roles gone, of a spec nothing of
    which may run, of a canary release over: a promoted one's once the stable side has rolled
    out to it) and, with the last canary one, its Secrets; the stable ones' rollouts."""
    deployments = cluster.deployments(names.selector(service.name))
    keep = wanted | canary.kept(deployments, wanted, target)
    rollouts, trial_gone = [], False
    for deployment in deployments:
        name = deployment["metadata"]["name"]
        trial = deployment["metadata"]["labels"].get(names.LABEL_TRACK) == canary.CANARY
        if name not in keep:
            cluster.delete("Deployment", name)
            trial_gone |= trial
        elif not trial:
            rollouts.append(observe.rollout(deployment))
    if trial_gone and not any(n in keep for n in _canary_names(deployments)):
        canary.delete_secrets(service, cluster)
    return rollouts


def _prune_sets(service: Service, cluster: Cluster, wanted: set[str]) -> None:
    """Delete the service's LeaderWorkerSets not `wanted` (of roles gone, of a spec that no
    longer spans hosts or may not run), and their leaders' Services; nothing on a cluster
    without the resource."""
    for found in cluster.leader_worker_sets(names.selector(service.name)) or []:
        name = found["metadata"]["name"]
        if name not in wanted:
            cluster.delete(lws.KIND, name)
            role = found["metadata"]["labels"].get(names.LABEL_ROLE, "")
            cluster.delete("Service", lws.leader_service_name(service.name, role))


def _canary_names(deployments: list[dict]) -> set[str]:
    return {
        d["metadata"]["name"]
        for d in deployments
        if d["metadata"]["labels"].get(names.LABEL_TRACK) == canary.CANARY
    }


def _apply(
    service: Service, spec: ServiceSpec, replicas, cluster: Cluster, kube
) -> tuple[set[str], set[str], str, set[str]]:
    """Apply the root, then what the spec renders, then what its active canary release's
    does; the names of its Deployments and of the canary's, what its rank tables wait for
    ("" when it has none, or they are complete), and the names of its LeaderWorkerSets. A
    spec whose instances span hosts on a cluster without LeaderWorkerSet applies nothing:
    ManifestError naming unit.size."""
    if lws.enabled(spec) and cluster.leader_worker_sets(names.selector(service.name)) is None:
        raise manifests.ManifestError("unit.size", lws.NOT_INSTALLED)
    tables = None
    if rank_tables.enabled(spec):  # written from the pods as they are now
        pods = cluster.pods(names.selector(service.name))
        wanted = [r for r, n in replicas.items() if n]
        tables = rank_tables.tables(pods, spec.spec_hash(), wanted, spec.unit_size())
    version = service.versions.order_by("-number").values_list("number", flat=True).first() or 0
    root = cluster.apply(manifests.root(service.name, version, spec.spec_hash(), kube.namespace))
    owner = manifests.Owner(root["metadata"]["name"], root["metadata"]["uid"])
    secret = settings.WHARF_TOKEN_KEY.encode()
    keys = {r: engine_key(secret, names.engine_key_name(service.name, r)) for r in replicas}
    commits = _hub_commits(service, spec)
    rendered = manifests.render(service.name, spec, version, replicas, kube, owner, keys,
                                tables.data if tables else None, commits)  # fmt: skip
    for obj in rendered:
        cluster.apply(obj)
    deployments = {o["metadata"]["name"] for o in rendered if o["kind"] == "Deployment"}
    sets = {o["metadata"]["name"] for o in rendered if o["kind"] == lws.KIND}
    given = canary.Rendering(version, kube, owner, replicas,
                             lambda of: _hub_commits(service, of))  # fmt: skip
    trial = canary.apply(service, canary.active(service), cluster, given)
    return deployments, trial, tables.waiting if tables else "", sets


def _hub_commits(service: Service, spec: ServiceSpec) -> dict[str, str]:
    """The commit of each hub model of the spec, which its pods stage: as the version records
    it, else resolved here and recorded. Raises ManifestError for what the user must fix,
    HubUnreachable for what may pass."""
    pins = VersionPins(service, spec.spec_hash())
    where = {ref: field for field, ref in reversed(spec_facts.model_refs(spec))}
    commits = {}
    for ref in provisioning.hub_models(spec):
        try:
            commits[ref] = provisioning.hub_commit(ref, spec, pins)
        except InstanceError as exc:
            raise manifests.ManifestError(where[ref], str(exc)) from None
    return commits


def _delete(service: Service, cluster: Cluster) -> float | None:
    """Delete the root (its dependents follow, by the garbage collector) and wait for the
    pods to be gone before the service's rows go."""
    if cluster.delete("ConfigMap", names.root_name(service.name)):
        record(service, "Deleting", "the service's objects on the cluster are being deleted")
    for deployment in cluster.deployments(names.selector(service.name)):
        cluster.delete("Deployment", deployment["metadata"]["name"])  # were it orphaned
    pods = cluster.pods(names.selector(service.name))
    newly_draining = _sync_instances(service, pods, "", "")
    if pods:
        Service.objects.filter(pk=service.pk).update(
            phase="deleting", progress=f"removing {len(pods)} pod(s)"
        )
        publish_snapshot(force=newly_draining)
        return MOVING
    finish_deletion(service, "every pod removed; service deleted")
    return None


def _sync_instances(service: Service, pods: list[dict], target: str, trial: str) -> bool:
    """Instance rows as the pods are: one per pod, created, updated, and removed with it, on
    the track it is routed on (`target` the service's spec hash, `trial` its active canary's:
    workers.kube.canary.track); True when one just started draining (the gateways must see it
    gone at once)."""
    rows = {row.name: row for row in service.instances.all()}
    now = timezone.now()
    newly_draining = False
    for pod in pods:
        row = rows.pop(pod["metadata"]["name"], None)
        seen = observe.instance(pod, was_ready=bool(row and row.ready_since))
        track, leaving = canary.track(seen.track, seen.spec_hash, target, trial)
        if leaving and seen.state != InstanceState.DRAINING:
            seen = replace(seen, state=InstanceState.DRAINING, message=canary.LEAVING)
        fields = {
            "role": seen.role, "runtime": RUNTIME, "node": seen.node, "spec_hash": seen.spec_hash,
            "state": seen.state, "url": seen.url, "message": seen.message[:2000],
            "restarts": seen.restarts, "track": track,
            # the key of the pod's own Deployment, which a promoted canary's pod keeps
            "engine_key_name": names.engine_key_name(service.name, seen.role, seen.track),
        }  # fmt: skip
        if seen.state == InstanceState.READY and not (row and row.ready_since):
            fields["ready_since"] = now
        if row is None:
            Instance.objects.create(service=service, name=seen.name, started_at=now, **fields)
            record(service, "InstanceCreated", f"pod {seen.name} created", seen.name)
            continue
        if seen.state != row.state:
            _record_transition(service, row.state, seen)
            if seen.state == InstanceState.DRAINING:
                fields["draining_since"] = now
                newly_draining = True
        Instance.objects.filter(pk=row.pk).update(**fields)
    for gone in rows.values():  # pods the cluster no longer has
        gone.delete()
        record(service, "InstanceRemoved", "pod deleted", gone.name)
    return newly_draining


_TRANSITIONS = {
    InstanceState.READY: "InstanceReady",
    InstanceState.UNHEALTHY: "InstanceUnhealthy",
    InstanceState.BACKOFF: "InstanceCrashed",
    InstanceState.FAILED: "InstanceFailed",
    InstanceState.DRAINING: "InstanceDraining",
}


def _record_transition(service: Service, before: str, seen: observe.PodInstance) -> None:
    reason = _TRANSITIONS.get(seen.state)  # type: ignore[call-overload]
    if reason:
        record(service, reason, seen.message or f"{before} → {seen.state}", seen.name)


def _record_warnings(service: Service, cluster: Cluster, pods: list[dict]) -> None:
    """The cluster's warnings about the service's pods that are not serving (FailedScheduling,
    image pull failures, back-offs) as service events, each once."""
    for pod in pods:
        if observe.instance(pod).state == InstanceState.READY:
            continue
        events = cluster.events(pod["metadata"]["name"])
        for reason, message, involved in observe.warnings(events):
            said = service.events.filter(reason=reason, message=message, instance=involved)
            if not said.exists():
                record(service, reason, message, involved)


def _write_status(service, spec, replicas, rollouts, error: str, tables: str) -> bool:
    """The service's phase from its rows and Deployments (and what its rank tables wait for,
    while it has pods); True when settled."""
    target = spec.spec_hash() if spec else ""
    every = list(service.instances.all())
    rows = [r for r in every if not _of_canary(service, r)]  # the stable Deployments' pods
    live = [r for r in rows if r.state != InstanceState.DRAINING]
    ready = Counter(
        r.role for r in live if r.state == InstanceState.READY and r.spec_hash == target
    )
    previous = sum(1 for r in live if r.state == InstanceState.READY and r.spec_hash != target)
    failed = [r for r in live if r.state == InstanceState.FAILED]
    error = error or (f"{failed[0].name}: {failed[0].message}" if failed else "")
    stalled = next((f"{r.role or 'service'}: {r.stalled}" for r in rollouts if r.stalled), "")
    waiting = next((r.message for r in live if r.message.startswith("not scheduled")), None)
    notes = [f"{r.name} {r.message}" for r in live if r.state == InstanceState.BACKOFF]
    if tables and live:
        notes.append(f"rank tables: {tables}")
    status = planning.status(
        service.desired_state, replicas, dict(ready), len(rows), service.phase,
        failed=bool(error) and not stalled, waiting=waiting,
        updating=any(r.spec_hash != target for r in live) or bool(stalled), paused=stalled,
        notes=notes, previous=previous,
    )  # fmt: skip
    last_error = error or (f"rollout stalled: {stalled}" if stalled else "")
    with transaction.atomic():
        updated = save_status(service, status, sum(ready.values()), last_error)
        if updated and stalled and stalled not in service.last_error:
            record(service, "RolloutStalled", f"{stalled}; the previous version keeps serving; "
                   "roll back or update the spec")  # fmt: skip
    moving = any(r.state != InstanceState.READY for r in every) or any(
        not r.current or r.updated < r.desired or r.ready < r.desired for r in rollouts
    )
    return not moving and not stalled


def _of_canary(service: Service, row: Instance) -> bool:
    """Whether an instance is a pod of a canary release's Deployment (by its engine key's
    name, the Deployment's), even once routed as a stable one."""
    return row.engine_key_name == names.engine_key_name(service.name, row.role, canary.CANARY)
