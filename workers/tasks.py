from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone

from contracts import reconcile
from controlplane.batches.store import expire_due, settle_orphans
from controlplane.nodes.models import Node
from controlplane.nodes.state import crossed_a_deadline
from controlplane.services.events import record_once
from controlplane.services.models import Service
from controlplane.usage import flush
from workers.celery import app
from workers.fleet import FleetSettings
from workers.locks import LeasedPasses, client, leased
from workers.models import hub_cache, storage
from workers.runtimes import get_runtime
from workers.scheduling.scheduler import schedule

log = logging.getLogger(__name__)
KUBERNETES = "kubernetes"
REQUEUE_DELAY = 2.0  # seconds between passes while a service is still moving
FAILED_DELAY = 15.0  # seconds before a pass that raised is tried again
FOLLOWED_KEY = "wharf:nodes:followed-at"  # when follow_nodes last looked (seconds, epoch)
FOLLOW_LOCK = "wharf:nodes:follow"  # held by the worker taking a look
NODES_FOLLOWED = 2.0  # seconds between looks at the nodes' heartbeats


def enqueue_reconcile(name: str, countdown: float = 0) -> None:
    """Queue one pass unless one is already queued (contracts.reconcile)."""
    reconcile.ask(client(), app, name, countdown)


@app.task(name=reconcile.TASK)
def reconcile_service(name: str, asked: float | None = None) -> None:
    redis_ = client()
    if asked is not None and reconcile.covered(redis_, name, asked):
        return  # a pass that started after this ask saw what it was asked for
    # One pass per service at a time; a trigger that finds the lock taken comes back shortly,
    # so an update made during a pass is never lost.
    with leased(f"wharf:reconcile:{name}", wait=0) as held:
        if not held:
            redis_.delete(reconcile.pending_key(name))  # its ask goes to the pass queued now
            enqueue_reconcile(name, countdown=REQUEUE_DELAY)
            return
        # The start is stamped before the marker goes: changes asked for from then on need a
        # pass after this one (contracts.reconcile, "the marker goes").
        started = reconcile.now(redis_)
        redis_.delete(reconcile.pending_key(name))
        again = reconcile_isolated(name)
        reconcile.ran(redis_, name, started)  # a pass that died covers no ask
    if again is not None:
        enqueue_reconcile(name, countdown=again)


def reconcile_isolated(name: str, fleet: FleetSettings | None = None) -> float | None:
    """One scheduler pass (workers.scheduling.scheduler); seconds until the next one, or None once
    the service has settled. A pass that raises (a database error, a lock that stays busy, a bug)
    is this service's problem alone: it is recorded as an event and retried later, never
    raised."""
    try:
        if settings.WHARF_RUNTIME == KUBERNETES:  # the cluster places, restarts and rolls
            from workers.kube import reconcile as kube
            from workers.kube.runtime import cluster, kube_settings

            return kube.reconcile(name, cluster(), kube_settings())
        return schedule(name, fleet or FleetSettings.from_django())
    except Exception as exc:  # an isolation boundary
        log.exception("reconcile of %s failed; retrying in %.0f s", name, FAILED_DELAY)
        _record_failure(name, exc)
        return FAILED_DELAY


def _record_failure(name: str, exc: Exception) -> None:
    """An event the service's page shows, once per distinct failure."""
    try:
        service = Service.objects.filter(name=name).first()
        if service is not None:
            record_once(service, "ReconcileFailed", f"{type(exc).__name__}: {exc}"[:2000])
    except Exception:  # the database may be what failed; the log line above has it all
        log.exception("could not record the failure of %s", name)


@app.task(name="workers.tasks.reconcile_all")
def reconcile_all() -> None:
    """The periodic pass over every service, behind every pass asked by a change
    (contracts.reconcile.sweep); instances whose service is gone are removed by their node's
    agent."""
    reconcile.sweep(client(), app, Service.objects.values_list("name", flat=True))


def follow_nodes() -> set[str]:
    """The services with instances on a node whose silence crossed its grace (they leave
    routing) or its eviction (they are placed elsewhere) since the last look: they get a pass
    now rather than at the next reconcile-all. The last look's time is kept in Redis, so
    the next worker to hold the lease goes on from where the last one stopped."""
    now = timezone.now()
    last = client().getset(FOLLOWED_KEY, now.timestamp())
    since = datetime.fromtimestamp(float(last), UTC) if last else now - timedelta(minutes=1)
    fleet = FleetSettings.from_django()
    grace, evict = timedelta(seconds=fleet.node_grace), timedelta(seconds=fleet.node_evict)
    silent = [
        name for name, beat in Node.objects.values_list("name", "heartbeat_at")
        if crossed_a_deadline(beat, since, now, grace, evict)
    ]  # fmt: skip
    if not silent:
        return set()
    log.info("nodes %s fell silent past a deadline: their services get a pass", silent)
    return set(Service.objects.filter(instances__node__in=silent)
               .values_list("name", flat=True).distinct())  # fmt: skip


class NodeFollower(LeasedPasses):
    """A look at the nodes' heartbeats every NODES_FOLLOWED s (follow_nodes): every worker runs
    one, the lease makes one look at a time happen fleet-wide. A thread, not a beat task: a
    look queued behind the passes of a busy fleet (up to 8 s at 500 nodes, benchmarks/README.md
    "Fleet at scale") delayed every eviction by as much."""

    def __init__(self, interval: float = NODES_FOLLOWED) -> None:
        super().__init__("wharf-node-follower", FOLLOW_LOCK, interval, follow_nodes)


@app.task(name="workers.tasks.expire_batches")
def expire_batches() -> None:
    """OpenAI batches past their 24 h window end expired (controlplane.batches.store), also
    when no gateway leases work and nobody reads them; those whose service went, settled."""
    expire_due()
    settle_orphans()


@app.task(name="workers.tasks.flush_usage")
def flush_usage() -> None:
    """Move the gateways' usage counts for finished minutes from Redis into the database."""
    flushed = flush.flush_usage(client(), time.time())
    if flushed:
        log.debug("flushed %d minute(s) of usage", flushed)


def paths_in_use() -> set[str] | None:
    """Every host path this node's instances read, running or stopped; None when that cannot
    be known, so that nothing is pruned on a partial picture."""
    try:
        runtime = get_runtime()
        observed = runtime.list()
    except Exception as exc:  # an unreachable daemon, an unreadable state dir, ...
        log.warning("model cache prune skipped: cannot list this node's instances: %s", exc)
        return None
    if not settings.WHARF_RUNTIME and runtime.name == "process":
        # Auto-detection chose local processes at start-up, when Docker did not answer; if
        # it answers now, containers this listing cannot see may be using the cache.
        from workers.runtimes.docker import DockerRuntime

        if DockerRuntime.available():
            log.warning(
                "model cache prune skipped: this worker runs the process runtime but Docker "
                "answers now; set WHARF_RUNTIME or restart the worker"
            )
            return None
    unknown = [instance.name for instance in observed if instance.paths is None]
    if unknown:
        log.warning(
            "model cache prune skipped: instances started before their paths were recorded "
            "(%s); it resumes once they are replaced",
            ", ".join(unknown),
        )
        return None
    return {path for instance in observed for path in instance.paths or ()}


@app.task(name="workers.tasks.prune_model_cache")
def prune_model_cache() -> list[str]:
    """Remove model versions in this node's cache (WHARF_CACHE_DIR) that no instance here uses.

    Runs on the node whose cache it prunes: beat routes it to the node's own queue
    (workers.celery.NODE_QUEUE). storage.prune keeps the newest version of every source and
    anything staged within the hour, whatever the in-use set says.
    """
    if settings.WHARF_RUNTIME == KUBERNETES:  # models are staged into the pods' own volumes
        return []
    in_use = paths_in_use()
    if in_use is None:
        return []
    removed = storage.prune(settings.WHARF_CACHE_DIR, in_use)
    removed += hub_cache.prune(settings.WHARF_CACHE_DIR, in_use)
    if removed:
        log.info(
            "model cache: removed %d version(s) no instance uses: %s",
            len(removed),
            ", ".join(path.name for path in removed),
        )
    return [str(path) for path in removed]
