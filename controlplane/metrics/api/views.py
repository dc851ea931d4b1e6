"""GET /services/<name>/metrics: each instance's engine figures for the console; GET
/metrics/targets: the engines as Prometheus HTTP service-discovery target groups."""

from __future__ import annotations

import time

import redis
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import APIException, ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts import engine_load
from controlplane.metrics import samples
from controlplane.metrics.api import schema
from controlplane.metrics.targets import MetricsPaths, ready_targets, sd_group
from controlplane.services.api.views import live_service
from controlplane.services.choices import DesiredState
from controlplane.services.models import Instance
from controlplane.workspaces.access import in_workspace

MAX_MINUTES = engine_load.SERIES_TTL // 60  # what a series holds


class MetricsUnavailable(APIException):
    status_code = 503
    default_detail = "Engine metrics are unavailable: Redis does not answer; try again shortly."


class ServiceMetrics(APIView):
    rights = {"GET": "read"}

    @extend_schema(
        operation_id="services_metrics",
        summary="Each instance's engine metrics: latest sample, last minute's rates, a series",
        parameters=[OpenApiParameter("minutes", int, description=f"series length, 1 to "
                                     f"{MAX_MINUTES} (default {MAX_MINUTES})")],
        responses={200: schema.SERVICE_METRICS},
    )  # fmt: skip
    def get(self, request: Request, name: str) -> Response:
        service = live_service(request, name)
        minutes = _minutes(request.query_params.get("minutes", str(MAX_MINUTES)))
        instances = list(service.instances.order_by("role", "name"))
        try:
            read = samples.read(samples.store(), [i.name for i in instances])
        except redis.RedisError:
            raise MetricsUnavailable() from None
        since = time.time() - minutes * 60
        return Response({
            "service": service.name,
            "interval": engine_load.INTERVAL,
            "instances": [_instance(i, *read[i.name], since) for i in instances],
        })  # fmt: skip


def _instance(row: Instance, latest: dict | None, series: list, since: float) -> dict:
    return {
        "name": row.name, "role": row.role, "node": row.node, "state": row.state,
        "latest": latest,
        "rates": samples.recent_rates(series),
        "series": samples.points(series, since),
    }  # fmt: skip


def _minutes(raw: str) -> int:
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_MINUTES):
        raise ParseError({"minutes": [f"a whole number from 1 to {MAX_MINUTES}"]})
    return int(raw)


class MetricsTargets(APIView):
    """Prometheus' http_sd_config reads this with an API token (`authorization`)."""

    rights = {"GET": "read"}

    @extend_schema(
        operation_id="metrics_targets",
        summary="The ready engines the caller may read, as Prometheus HTTP SD target groups",
        responses={200: schema.SD_GROUPS},
    )
    def get(self, request: Request) -> Response:
        live = Instance.objects.exclude(service__desired_state=DesiredState.DELETED)
        instances = in_workspace(request, live, field="service__workspace")
        return Response([sd_group(t) for t in ready_targets(instances, MetricsPaths())])
