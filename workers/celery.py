"""The Celery app. Workers reconcile services; beat heals drift every WHARF_RECONCILE_INTERVAL s.

Every worker is a node of the fleet (WHARF_NODE_NAME, by default the host name): it registers
its Node row and heartbeats from a thread (workers.nodes.node), and it also consumes its node's own
queue, `wharf.node.<node name>`, for work that must run on each host rather than on whichever
worker is free: pruning the host's model cache. The
beat embedded in a worker (`manage.py worker` starts Celery's worker with --beat, one per
host) sends that work to its own host's queue, so each host prunes its own cache; a beat
started on its own prunes only the host it runs on. The fleet-wide entries
(reconcile-all, flush-usage) are sent by one beat only, the one holding the leader lease in
Redis (workers.beat.LeaderScheduler): N hosts, one reconcile-all per period.
"""

from __future__ import annotations

import os

import django
from celery import Celery
from celery.signals import (
    celeryd_after_setup,
    task_postrun,
    task_prerun,
    worker_ready,
    worker_shutdown,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.db import close_old_connections  # noqa: E402

NODE_QUEUE = f"wharf.node.{settings.WHARF_NODE_NAME}"
PRUNE_INTERVAL = 3600.0  # seconds between model-cache prunes on each host

app = Celery("wharf")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    task_acks_late=True,  # a worker that dies mid-reconcile leaves the task for another
    worker_prefetch_multiplier=1,
    # Every host's beat sends its own host's entries; only the leader the fleet-wide ones.
    beat_scheduler="workers.beat:LeaderScheduler",
    beat_schedule={
        "reconcile-all": {
            "task": "workers.tasks.reconcile_all",
            "schedule": float(settings.WHARF_RECONCILE_INTERVAL),
        },
        # Usage counted in Redis reaches the database at most a minute and 15 s late.
        "flush-usage": {"task": "workers.tasks.flush_usage", "schedule": 15.0},
        "expire-batches": {"task": "workers.tasks.expire_batches", "schedule": 300.0},
        # This host's cache, pruned by this host's worker; a prune nobody took within the
        # hour (the worker was down) is dropped, the next one does the same work.
        "prune-model-cache": {
            "task": "workers.tasks.prune_model_cache",
            "schedule": PRUNE_INTERVAL,
            "options": {"queue": NODE_QUEUE, "expires": PRUNE_INTERVAL},
        },
    },
)
app.autodiscover_tasks(["workers"])
# Celery's Django fixup closes every database connection before and after each task: at 500
# nodes a burst's passes spent more of their time opening sessions with PostgreSQL than in
# their queries (benchmarks/README.md). A task's thread keeps its session instead, as long as
# the database settings keep one (CONN_MAX_AGE) and it is usable (_kept_sessions); the fixup
# still closes them after this many tasks' starts and ends.
app.conf["CELERY_DB_REUSE_MAX"] = 1000


@task_prerun.connect
@task_postrun.connect
def _kept_sessions(sender=None, **kwargs) -> None:
    """Before and after each task a worker runs, as Django does around a request: close this
    thread's sessions that failed or are past CONN_MAX_AGE, and check the rest before their
    next query (CONN_HEALTH_CHECKS: a database restarted meanwhile costs a reconnect, not a
    failed pass). Not for a task run in place (eagerly), as the fixup does not either."""
    if not getattr(getattr(sender, "request", None), "is_eager", False):
        close_old_connections()


@celeryd_after_setup.connect
def consume_node_queue(sender, instance, **kwargs) -> None:
    """Add this host's queue to what the worker consumes (also when -Q narrowed it)."""
    instance.app.amqp.queues.select_add(NODE_QUEUE)


@worker_ready.connect
def start_node(sender, **kwargs) -> None:
    """The node's heartbeat, its agent, its log and tokenizer servers, its engines' scraper and
    its instances' usage sampler, in the worker's main process; and the autoscaler, the
    canary controller and the nodes' follower, whose passes run on one worker at a time
    (workers.scaling.autoscaling, workers.scheduling.canaries, workers.tasks)."""
    from workers.fleet import FleetSettings
    from workers.nodes.agent import Agent
    from workers.nodes.node import Heartbeat
    from workers.nodes.node_logs import LogServer
    from workers.nodes.node_tokenizer import TokenizerServer
    from workers.runtimes import get_runtime
    from workers.scaling.autoscaling import Autoscaler
    from workers.scaling.scraper import Scraper
    from workers.scaling.usage_sampler import UsageSampler
    from workers.scheduling.canaries import CanaryController
    from workers.tasks import NodeFollower, enqueue_reconcile

    def reconcile(services: set[str]) -> None:
        for name in services:
            enqueue_reconcile(name)

    if settings.WHARF_RUNTIME == "kubernetes":
        _threads.extend(_cluster_threads(enqueue_reconcile))
        _threads.extend([Autoscaler(), CanaryController(), NodeFollower()])
        for thread in _threads:
            thread.start()
        return
    _threads.append(Heartbeat(get_runtime(), settings.WHARF_NODE_HEARTBEAT))
    _threads.append(LogServer(settings.WHARF_NODE_NAME, get_runtime()))
    _threads.append(TokenizerServer(settings.WHARF_NODE_NAME, get_runtime()))
    _threads.append(Scraper(settings.WHARF_NODE_NAME))
    _threads.append(UsageSampler(settings.WHARF_NODE_NAME, get_runtime().cpu_seconds))
    _threads.append(Agent(settings.WHARF_NODE_NAME, get_runtime(), FleetSettings.from_django(),
                          on_change=reconcile))  # fmt: skip
    _threads.extend([Autoscaler(), CanaryController(), NodeFollower()])
    for thread in _threads:
        thread.start()


def _cluster_threads(enqueue) -> list:
    """A worker of WHARF_RUNTIME=kubernetes is no node: the cluster places, restarts and keeps
    logs. It answers log requests for pods and watches the cluster for changes."""
    from contracts.node_logs import CLUSTER
    from controlplane.services.models import Service
    from workers.kube.runtime import PodLogs, Watcher
    from workers.nodes.node_logs import LogServer
    from workers.scaling.scraper import Scraper

    def known() -> list[str]:
        return list(Service.objects.values_list("name", flat=True))

    pods = {"runtime": CLUSTER}  # the engines' metrics, read at their pod IPs
    return [LogServer(CLUSTER, PodLogs()), Watcher(enqueue, known), Scraper(CLUSTER, where=pods)]


@worker_shutdown.connect
def stop_node(sender, **kwargs) -> None:
    for thread in _threads:
        thread.stop()


_threads: list = []
