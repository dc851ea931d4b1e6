"""GET /api/v1/usage: token usage totals and a time series, from the flushed UsageRecords.

Usage reaches the database when the workers flush a finished minute (every 15 s), so the
current minute is never in the answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Q, QuerySet, Sum
from django.db.models.functions import Coalesce, Trunc
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts.usage import SERVICE_TOKEN_ID
from controlplane.services.models import Service
from controlplane.tokens.api.errors import Invalid
from controlplane.tokens.api.validation import timestamp
from controlplane.tokens.models import ApiKey
from controlplane.usage.models import UsageRecord

GROUPS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}
DEFAULT_GROUP = "hour"
DEFAULT_RANGE = timedelta(days=1)
MAX_POINTS = 10_000  # a month by the minute would be 43,200 points: ask for hours instead
SUMS = {
    "requests": Coalesce(Sum("requests"), 0),
    "prompt_tokens": Coalesce(Sum("prompt_tokens"), 0),
    "completion_tokens": Coalesce(Sum("completion_tokens"), 0),
    "latency_ms": Coalesce(Sum("latency_ms"), 0),
    "ttft_ms": Coalesce(Sum("ttft_ms"), 0),
}


@dataclass(frozen=True)
class Query:
    since: datetime
    until: datetime
    group: str
    service: str | None
    key: str | None


def _time(params, name: str, errors: dict[str, list[str]]) -> datetime | None:
    if not (value := params.get(name)):
        return None
    try:
        return timestamp(value)
    except ValueError as exc:
        errors[name] = [str(exc)]
        return None


def parse_query(params, now: datetime) -> Query:
    """The query the parameters ask for; Invalid naming every bad one otherwise."""
    errors: dict[str, list[str]] = {}
    until = _time(params, "until", errors) or now
    since = _time(params, "since", errors) or until - DEFAULT_RANGE
    if since >= until and not errors:
        errors["since"] = ["must be before until (which defaults to now)"]
    group = params.get("group") or DEFAULT_GROUP
    if group not in GROUPS:
        errors["group"] = [f"one of {', '.join(GROUPS)}"]
    elif not errors and (until - since) / GROUPS[group] > MAX_POINTS:
        errors["group"] = [f"more than {MAX_POINTS} {group}s from since to until; "
                           "group by a longer period or ask for a shorter range"]  # fmt: skip
    key = params.get("key") or None
    if key is not None and not re.fullmatch(rf"k\d+|{re.escape(SERVICE_TOKEN_ID)}", key):
        errors["key"] = [f"a key id such as k7, or {SERVICE_TOKEN_ID!r} for service tokens"]
    if errors:
        raise Invalid("query", errors)
    return Query(since, until, group, params.get("service") or None, key)


def visible_usage(request: Request) -> QuerySet[UsageRecord]:
    """Staff see all usage; anyone else the usage of their own keys and of the services they
    own (whoever called them)."""
    if request.user.is_staff:
        return UsageRecord.objects.all()
    own = ApiKey.objects.filter(owner=request.user).values_list("pk", flat=True)
    services = Service.objects.filter(owner=request.user).values_list("name", flat=True)
    return UsageRecord.objects.filter(
        Q(key_id__in=[f"k{pk}" for pk in own]) | Q(service__in=list(services))
    )


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
    def get(self, request: Request) -> Response:
        query = parse_query(request.query_params, timezone.now())
        records = visible_usage(request).filter(minute__gte=query.since, minute__lt=query.until)
        records = records.filter(
            Q(service=query.service) if query.service else Q(),
            Q(key_id=query.key) if query.key else Q(),
        )
        series = (
            records.order_by()
            .annotate(time=Trunc("minute", query.group, tzinfo=UTC))
            .values("time")
            .annotate(**SUMS)
            .order_by("time")
        )
        return Response({
            "since": query.since, "until": query.until, "group": query.group,
            "service": query.service, "key": query.key,
            "totals": _with_total(records.aggregate(**SUMS)),
            "series": [_with_total(row) for row in series],
        })  # fmt: skip
