"""GET /metrics on the API: the control plane's figures (controlplane.metrics.figures) in
Prometheus' text format, read from the database at scrape time by a custom collector, so no
figure is ever stale or kept in a process. One figure comes from Redis rather than the
database: the age of the oldest usage minute waiting there for the workers' flush
(controlplane.metrics.usage_backlog).

They name every workspace, service and node, so the page is closed like the gateway's
(gateway/observe/metrics_access.py): it answers only
`Authorization: Bearer <WHARF_API_METRICS_TOKEN>`, and with no token configured it answers no
one (403).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterator

from django.conf import settings
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from contracts.spec import SpecError
from contracts.spec_queue import ASYNC
from controlplane.metrics.figures import (
    node_states,
    quota_figures,
    service_figures,
    unflushed_age,
)
from controlplane.metrics.samples import store
from controlplane.metrics.usage_backlog import waiting_minutes
from controlplane.nodes.models import Node
from controlplane.queues.models import ItemState, QueueItem, QueueName
from controlplane.services.choices import DesiredState, Phase
from controlplane.services.models import Service
from controlplane.workspaces.models import Workspace
from controlplane.workspaces.quota_checks import held_by, queued_quota
from controlplane.workspaces.quotas import Footprint


class ControlPlaneCollector(Collector):
    """Services, nodes, quotas and queues as gauges, from the rows as they are now, and the
    usage flush's lag from Redis."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self._services()
        yield self._nodes()
        yield from self._quotas()
        yield from self._queues()
        yield self._usage_backlog()

    def _services(self) -> Iterator[GaugeMetricFamily]:
        labels = ["workspace", "service"]
        desired = GaugeMetricFamily(
            "wharf_service_instances_desired",
            "Instances a service wants now (0 while stopped), all roles together.",
            labels=labels,
        )
        ready = GaugeMetricFamily(
            "wharf_service_instances_ready", "Instances of a service that serve.", labels=labels
        )
        paused = GaugeMetricFamily(
            "wharf_service_rollout_paused",
            "1 while a service's rollout is paused (its new version does not start; the "
            "previous one keeps serving).",
            labels=labels,
        )
        rows = Service.objects.exclude(desired_state=DesiredState.DELETED).select_related(
            "workspace"
        )
        for row in rows:
            try:
                spec = row.parsed_spec()
            except SpecError:
                spec = None
            running = row.desired_state == DesiredState.RUNNING and row.phase != Phase.COMPLETED
            figures = service_figures(
                row.workspace.name, row.name, spec, running, row.autoscale, row.ready_instances,
                row.progress,
            )  # fmt: skip
            values = [figures.workspace, figures.service]
            desired.add_metric(values, figures.desired)
            ready.add_metric(values, figures.ready)
            paused.add_metric(values, int(figures.rollout_paused))
        yield from (desired, ready, paused)

    def _nodes(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "wharf_node_state",
            "1 for the state a node is in (ready, not_ready, cordoned, draining), 0 for the "
            "others.",
            labels=["node", "state"],
        )
        for node in Node.objects.all():
            for state, value in node_states(node.state).items():
                family.add_metric([node.name, state], value)
        return family

    def _quotas(self) -> Iterator[GaugeMetricFamily]:
        labels = ["workspace", "resource"]
        used = GaugeMetricFamily(
            "wharf_quota_used",
            "What a workspace's services hold of a resource that has a quota (services, "
            "instances, cards.gpu, cards.npu, queued_items: Async items and batch requests "
            "not yet answered).",
            labels=labels,
        )
        limit = GaugeMetricFamily(
            "wharf_quota_limit", "A workspace's quota of a resource (its ceiling applied).",
            labels=labels,
        )  # fmt: skip
        queued = dict(
            QueueItem.objects.filter(queue=QueueName.INPUT).order_by()
            .values_list("service__workspace").annotate(n=Count("id"))
        )  # fmt: skip
        for workspace in Workspace.objects.all():
            quotas = workspace.quotas()
            holding = quotas.services is not None or quotas.instances is not None or quotas.cards
            held = held_by(workspace) if holding else Footprint()  # no quota: no query
            bound = (queued_quota(workspace), queued.get(workspace.pk, 0))
            for figure in quota_figures(workspace.name, quotas, held, bound):
                used.add_metric([figure.workspace, figure.resource], figure.used)
                limit.add_metric([figure.workspace, figure.resource], figure.limit)
        yield from (used, limit)

    def _queues(self) -> Iterator[GaugeMetricFamily]:
        """Async services' queues (controlplane.queues): items by queue and state, and how
        long the oldest waiting item has waited; zeros for a queue with none."""
        items = GaugeMetricFamily(
            "wharf_queue_items",
            "Items in an Async service's queue: input pending (waiting for an instance) or "
            "working (at one), and sink pending (answers waiting to be taken).",
            labels=["workspace", "service", "queue", "state"],
        )
        oldest = GaugeMetricFamily(
            "wharf_queue_oldest_pending_seconds",
            "How long the oldest item waiting in an Async service's input queue has waited.",
            labels=["workspace", "service"],
        )
        services = dict(Service.objects.exclude(desired_state=DesiredState.DELETED)
                        .filter(spec__metadata__type=ASYNC)
                        .values_list("name", "workspace__name"))  # fmt: skip
        counts = {(s, q, st): n for s, q, st, n in QueueItem.objects.filter(
            service__name__in=services).values_list("service__name", "queue", "state")
            .annotate(n=Count("id"))}  # fmt: skip
        firsts = dict(QueueItem.objects.filter(
            service__name__in=services, queue=QueueName.INPUT, state=ItemState.PENDING)
            .values_list("service__name").annotate(first=Min("created_at")))  # fmt: skip
        now = timezone.now()
        for name, workspace in sorted(services.items()):
            for queue, state in QUEUE_STATES:
                items.add_metric(
                    [workspace, name, queue, state], counts.get((name, queue, state), 0)
                )
            first = firsts.get(name)
            oldest.add_metric([workspace, name], (now - first).total_seconds() if first else 0.0)
        yield from (items, oldest)

    def _usage_backlog(self) -> GaugeMetricFamily:
        """One sample (the same on every API replica), or none while Redis does not answer:
        the gateways' own wharf_gateway_usage_unflushed_age_seconds tells that case."""
        family = GaugeMetricFamily(
            "wharf_usage_unflushed_age_seconds",
            "Seconds since the oldest usage minute still in Redis ended: how long it has "
            "waited for the workers' flush into the database (every 15 s); 0 when none waits.",
        )
        minutes = waiting_minutes(store())
        if minutes is not None:
            family.add_metric([], unflushed_age(minutes, time.time()))
        return family


# The queue and state pairs an item can be in (sink items are never worked on).
QUEUE_STATES = ((QueueName.INPUT, ItemState.PENDING), (QueueName.INPUT, ItemState.WORKING),
                (QueueName.SINK, ItemState.PENDING))  # fmt: skip


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ControlPlaneCollector())
    return registry


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.WHARF_API_METRICS_TOKEN
    if not token:
        return JsonResponse({"detail": (
            "The control plane's metrics are closed: set WHARF_API_METRICS_TOKEN (or "
            "WHARF_API_METRICS_TOKEN_FILE) and have Prometheus send it as "
            "'Authorization: Bearer <token>'.")}, status=403)  # fmt: skip
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        presented.strip().encode(), token.encode()
    ):
        response = JsonResponse({"detail": (
            "The control plane's metrics need the operator's metrics token as 'Authorization: "
            "Bearer <token>' (WHARF_API_METRICS_TOKEN); an API token does not open them.")},
            status=401)  # fmt: skip
        response["WWW-Authenticate"] = "Bearer"
        return response
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)
