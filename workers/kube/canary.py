"""A canary release (contracts.canary) on Kubernetes: its version as Deployments of their own.

While a release is active, each pass applies, beside the stable objects, what the canary's
spec renders with track "canary" (contracts.kube.manifests): a Deployment per role with as many
pods as the stable side wants, and its Secret holding those Deployments' own engine keys. Its
pods are instances on track "canary", which the canary controller (workers.scheduling.canaries)
waits for and the gateways give the canary's share of the calls.

When no release is active, the canary's Deployments go, their Secrets with them:

- rolled back or aborted: at once; its pods, still running while the garbage collector
  reaches them, are read as draining, so they leave routing at once;
- promoted: the service's spec is the canary's now (controlplane.services.canaries.promote),
  so its stable Deployments roll to it. The canary's pods run the service's version and are
  routed as stable ones until every stable Deployment has rolled out (each of its replicas of
  the new template and available); only then do they go, so no call lacks an instance.

A canary that cannot run on the cluster (a ManifestError, a spec stored before a rule
tightened) is rolled back, saying why, as a canary instance that cannot start is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from contracts import canary as canaries
from contracts import spec_facts
from contracts.engine_keys import engine_key
from contracts.kube import manifests, names
from contracts.spec import ServiceSpec, SpecError, parse_spec
from controlplane.services.canaries import finish
from controlplane.services.choices import DesiredState
from controlplane.services.models import Canary, Service
from controlplane.services.sealing import unseal
from workers.kube.api import Cluster

CANARY = canaries.CANARY_TRACK
LEAVING = "its canary release ended: out of routing, its Deployment deleted"


def active(service: Service) -> Canary | None:
    """The service's active release, if any, while the service runs."""
    if service.desired_state != DesiredState.RUNNING:  # the controller aborts it
        return None
    return service.canaries.filter(state__in=canaries.ACTIVE).first()


def replicas(canary: dict[str, int], stable: dict[str, int]) -> dict[str, int]:
    """The canary's pods per role: as many as the stable side wants of that role; a role only
    the canary's spec has, as many as its own spec says."""
    return {role: stable.get(role, count) for role, count in canary.items()}


def track(pod_track: str, spec_hash: str, service_hash: str, active_hash: str) -> tuple[str, bool]:
    """The track a pod's instance is routed on, and whether it is leaving (its release over).

    A stable pod is stable. A canary pod of the service's own version (its release promoted)
    serves as a stable one; one of the active release's version is the canary; any other is
    of a release that ended (or of a version the canary's Deployment rolls away from)."""
    if pod_track != CANARY or spec_hash == service_hash:
        return "", False
    return CANARY, spec_hash != active_hash


def _track_of(deployment: dict) -> str:
    return str(((deployment.get("metadata") or {}).get("labels") or {}).get(names.LABEL_TRACK, ""))


def rolled_out(deployment: dict, spec_hash: str) -> bool:
    """Whether a Deployment's template is of `spec_hash` and every replica it wants is of that
    template and available, the controller having seen its newest spec (the condition of
    `kubectl rollout status`)."""
    meta, status = deployment.get("metadata") or {}, deployment.get("status") or {}
    wanted = int((deployment.get("spec") or {}).get("replicas") or 0)
    return (
        (meta.get("labels") or {}).get(names.LABEL_SPEC_HASH) == spec_hash
        and int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
        and int(status.get("updatedReplicas") or 0) == wanted
        and int(status.get("replicas") or 0) == wanted
        and int(status.get("availableReplicas") or 0) >= wanted
    )


def kept(deployments: list[dict], applied: set[str], service_hash: str) -> set[str]:
    """The promoted release's Deployments (canary ones of the service's spec hash) to keep
    beside those just `applied`: while a stable Deployment applied has not rolled out to it."""
    stable = [d for d in deployments if not _track_of(d) and d["metadata"]["name"] in applied]
    if all(rolled_out(d, service_hash) for d in stable):
        return set()
    return {
        d["metadata"]["name"]
        for d in deployments
        if _track_of(d) == CANARY
        and (d["metadata"].get("labels") or {}).get(names.LABEL_SPEC_HASH) == service_hash
    }


@dataclass(frozen=True)
class Rendering:
    """What the stable side's render was given that the canary's is given too."""

    version: int  # the service's version the objects are annotated with
    settings: names.KubeSettings
    owner: manifests.Owner
    stable: dict[str, int]  # the stable side's pods per role
    hub_commits: Callable[[ServiceSpec], dict[str, str]]  # raises ManifestError, HubUnreachable


def render(service: Service, release: Canary, given: Rendering) -> list[dict]:
    """The release's objects; raises ManifestError or SpecError for a canary that cannot run."""
    spec = parse_spec(unseal(release.spec))
    counts = replicas(spec_facts.replicas(spec, service.autoscale), given.stable)
    secret = settings.WHARF_TOKEN_KEY.encode()
    keys = {
        role: engine_key(secret, names.engine_key_name(service.name, role, CANARY))
        for role in counts
    }
    return manifests.render(
        service.name, spec, given.version, counts, given.settings, given.owner, keys, None,
        given.hub_commits(spec), track=CANARY,
    )  # fmt: skip


def apply(service: Service, release: Canary | None, cluster: Cluster, given: Rendering) -> set[str]:
    """Apply the active release's objects; the names of its Deployments (none without one, or
    when it cannot run: it is rolled back, saying why)."""
    if release is None:
        return set()
    try:
        rendered = render(service, release, given)
    except (manifests.ManifestError, SpecError) as exc:
        _roll_back(release, f"the new version cannot run on the cluster: {exc}")
        return set()
    for obj in rendered:
        cluster.apply(obj)
    return {o["metadata"]["name"] for o in rendered if o["kind"] == "Deployment"}


def _roll_back(release: Canary, why: str) -> None:
    with transaction.atomic():
        still = Canary.objects.select_for_update().filter(pk=release.pk, state__in=canaries.ACTIVE)
        found = still.first()
        if found is not None:  # the controller or a hand may have ended it meanwhile
            finish(found, canaries.ROLLED_BACK, why)


def delete_secrets(service: Service, cluster: Cluster) -> None:
    """The canary's Secrets, once its last Deployment is gone (absent ones are no error)."""
    cluster.delete("Secret", names.secret_name(service.name, CANARY))
    cluster.delete("Secret", manifests.pull_secret_name(service.name, CANARY))
