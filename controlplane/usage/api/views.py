"""GET /api/v1/usage: token usage totals and a time series, from the flushed UsageRecords.

Usage reaches the database when the workers flush a finished minute (every 15 s), so the
current minute is never in the answer.
"""

from __future__ import annotations

from datetime import UTC

from django.db.models import Q, QuerySet, Sum
from django.db.models.functions import Coalesce, Trunc
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.tokens.api.negotiation import NamedFormatNegotiation
from controlplane.usage.api.query import BASE, parse_query
from controlplane.usage.models import UsageRecord
from controlplane.workspaces.access import in_workspace

SUMS = {
    "requests": Coalesce(Sum("requests"), 0),
    "prompt_tokens": Coalesce(Sum("prompt_tokens"), 0),
    "completion_tokens": Coalesce(Sum("completion_tokens"), 0),
    "latency_ms": Coalesce(Sum("latency_ms"), 0),
    "ttft_ms": Coalesce(Sum("ttft_ms"), 0),
    "batch_requests": Coalesce(Sum("batch_requests"), 0),
    "batch_prompt_tokens": Coalesce(Sum("batch_prompt_tokens"), 0),
    "batch_completion_tokens": Coalesce(Sum("batch_completion_tokens"), 0),
}


def visible_usage(request: Request) -> QuerySet[UsageRecord]:
    """The usage of the acting workspace's services, whoever called them (staff: all usage)."""
    return in_workspace(request, UsageRecord.objects.all())


def _with_total(row: dict) -> dict:
    """Totals and averages; the latency sums stay internal."""
    requests = row["requests"] or 1
    return {
        **{k: v for k, v in row.items() if k not in ("latency_ms", "ttft_ms")},
        "total_tokens": row["prompt_tokens"] + row["completion_tokens"],
        "avg_latency_ms": round(row["latency_ms"] / requests, 1),
        "avg_ttft_ms": round(row["ttft_ms"] / requests, 1),
    }


class Usage(APIView):
    content_negotiation_class = NamedFormatNegotiation

    def get(self, request: Request) -> Response:
        query = parse_query(request.query_params, timezone.now())
        records = visible_usage(request).filter(minute__gte=query.since, minute__lt=query.until)
        records = records.filter(
            Q(service=query.service) if query.service else Q(),
            Q(key_id=query.key) if query.key else Q(),
            Q(adapter="" if query.adapter == BASE else query.adapter) if query.adapter else Q(),
        )
        models = records.order_by().values("service", "adapter").annotate(**SUMS)
        keys = records.order_by().values("key_id").annotate(**SUMS).order_by("key_id")
        series = (
            records.order_by()
            .annotate(time=Trunc("minute", query.group, tzinfo=UTC))
            .values("time")
            .annotate(**SUMS)
            .order_by("time")
        )
        return Response({
            "since": query.since, "until": query.until, "group": query.group,
            "service": query.service, "key": query.key, "adapter": query.adapter,
            "totals": _with_total(records.aggregate(**SUMS)),
            # One row per service's model and per LoRA adapter (adapter "": the base model).
            "models": [_with_total(row) for row in models.order_by("service", "adapter")],
            # One row per API key (key_id "-": the services' own tokens), for the console.
            "keys": [_with_total(row) for row in keys],
            "series": [_with_total(row) for row in series],
        })  # fmt: skip
