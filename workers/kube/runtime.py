"""The Kubernetes runtime in a worker: its settings, its cluster, its pod-log reader and the
watch that turns the cluster's changes into reconcile passes.

Every worker of a WHARF_RUNTIME=kubernetes deployment runs the same: no heartbeat, agent or
node log server of its own (the cluster places, restarts and serves logs), a LogServer that
answers the cluster's pseudo-node (contracts.node_logs.CLUSTER) from pod logs, and a Watcher
that asks a pass of a service whenever one of its pods or Deployments changes.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable

from django import db
from django.conf import settings

from contracts.kube import names
from controlplane.cluster import kube_settings
from workers.kube import nodes
from workers.kube.api import Cluster, connect

log = logging.getLogger(__name__)
WATCH_S = 60  # seconds one watch call lasts before it is made again
RETRY_S = 5.0  # seconds before a failed watch is made again


@functools.cache
def cluster() -> Cluster:
    """This deployment's cluster and namespace (WHARF_KUBECONFIG, WHARF_K8S_NAMESPACE)."""
    return Cluster(connect(settings.WHARF_KUBECONFIG), settings.WHARF_K8S_NAMESPACE)


class PodLogs:
    """What a LogServer needs of a runtime: a pod's log, from the cluster."""

    name = "kubernetes"

    def __init__(self, get_cluster: Callable[[], Cluster] = cluster) -> None:
        self._cluster = get_cluster

    def logs(self, name: str, tail: int = 200) -> str:
        return self._cluster().log(name, tail)


def service_of(obj: dict, known: Callable[[], list[str]]) -> str | None:
    """The service an object of Wharf's belongs to: its exact name from the annotation, or
    the service whose slug its label carries."""
    meta = obj.get("metadata") or {}
    exact = (meta.get("annotations") or {}).get(names.ANNOTATION_SERVICE)
    if exact:
        return str(exact)
    label = (meta.get("labels") or {}).get(names.LABEL_SERVICE)
    if not label:
        return None
    return next((name for name in known() if names.slug(name) == label), None)


class Watcher:
    """Watches Wharf's pods and Deployments (one thread each) and asks a pass of the service
    each change concerns: a pod that turns ready, starts terminating or fails is seen within
    the watch's latency, not the periodic pass's. A third thread reads the cluster's nodes."""

    def __init__(
        self,
        on_change: Callable[[str], None],
        known: Callable[[], list[str]],
        get_cluster: Callable[[], Cluster] = cluster,
        watch_s: int = WATCH_S,
    ) -> None:
        self._on_change, self._known, self._cluster = on_change, known, get_cluster
        self._watch_s = watch_s
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._run, args=(kind,), name=f"wharf-watch-{kind}", daemon=True
            )  # fmt: skip
            for kind in ("pods", "deployments")
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stops asking passes at once; a watch call in flight ends with its connection when
        the process exits (the threads are daemons), so a stop never waits out a watch."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=1)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the threads to end (a watch ends within its `watch_s`)."""
        for thread in self._threads:
            thread.join(timeout)

    def _nodes(self) -> None:
        """The cluster's nodes as Node rows (workers.kube.nodes), every heartbeat."""
        try:
            while not self._stop.is_set():
                try:
                    nodes.sync(self._cluster(), kube_settings())
                except Exception as exc:  # the API server away: the rows go stale, not_ready
                    log.warning("reading the cluster's nodes failed: %s", exc)
                self._stop.wait(settings.WHARF_NODE_HEARTBEAT)
        finally:
            db.connection.close()  # this thread's own

    def _run(self, kind: str) -> None:
        try:
            self._watch(kind)
        finally:
            db.connection.close()  # this thread's own (`known` reads the services)

    def _watch(self, kind: str) -> None:
        since: str | None = None  # the last resourceVersion seen: a new call resumes there
        while not self._stop.is_set():
            try:
                cluster = self._cluster()
                watch = cluster.watch_pods if kind == "pods" else cluster.watch_deployments
                for event in watch(self._watch_s, since):
                    if self._stop.is_set():
                        return
                    since = (event["object"].get("metadata") or {}).get("resourceVersion", since)
                    name = service_of(event["object"], self._known)
                    if name:
                        self._on_change(name)
            except Exception as exc:  # the API server away, a version too old: start afresh
                log.warning("watching %s failed, again in %.0f s: %s", kind, RETRY_S, exc)
                since = None
                self._stop.wait(RETRY_S)
