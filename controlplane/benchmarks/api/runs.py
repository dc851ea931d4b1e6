"""GET/POST /api/v1/services/<name>/benchmarks: the benchmark runs of a service, newest first.

`wharf bench static|dynamic` posts a run when it finishes; the console charts them. A service
keeps its newest MAX_KEPT_RUNS runs: older ones are removed as new ones arrive.
"""

from __future__ import annotations

from django.db import transaction
from django.shortcuts import get_object_or_404
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.benchmarks.models import BenchmarkRun
from controlplane.benchmarks.validation import KINDS, InvalidRunError, parse_run
from controlplane.services.api.views import visible_services
from controlplane.tokens.api.errors import Invalid
from controlplane.tokens.api.negotiation import FORMAT
from controlplane.tokens.api.values import parameter_errors

MAX_KEPT_RUNS = 100
MAX_LIMIT = 100
DEFAULT_LIMIT = 20
LIST_PARAMETERS = ("limit", "kind", FORMAT)


def as_json(run: BenchmarkRun) -> dict:
    return {
        "id": run.pk,
        "service": run.service.name,
        "kind": run.kind,
        "created_at": run.created_at,
        "created_by": run.owner.get_username() if run.owner else None,
        "parameters": run.parameters,
        "rows": run.rows,
    }


def _list_query(params) -> tuple[int, str | None]:
    errors = parameter_errors(params, LIST_PARAMETERS)
    limit = params.get("limit", str(DEFAULT_LIMIT))
    if not (limit.isascii() and limit.isdigit() and 1 <= int(limit) <= MAX_LIMIT):
        errors["limit"] = [f"a whole number from 1 to {MAX_LIMIT}"]
    kind = params.get("kind") or None
    if kind is not None and kind not in KINDS:
        errors["kind"] = [f"one of {', '.join(KINDS)}"]
    if errors:
        raise Invalid("query", errors)
    return int(limit), kind


class BenchmarkRuns(APIView):
    def get(self, request: Request, name: str) -> Response:
        service = get_object_or_404(visible_services(request, live=False), name=name)
        limit, kind = _list_query(request.query_params)
        runs = service.benchmark_runs.select_related("owner", "service")
        if kind:
            runs = runs.filter(kind=kind)
        return Response([as_json(run) for run in runs[:limit]])

    def post(self, request: Request, name: str) -> Response:
        try:
            run = parse_run(request.data)
        except InvalidRunError as exc:
            raise Invalid("benchmark run", exc.errors, "; nothing was saved") from None
        with transaction.atomic():
            service = get_object_or_404(visible_services(request), name=name)
            stored = BenchmarkRun.objects.create(
                service=service, kind=run.kind, parameters=run.parameters, rows=run.rows,
                owner=request.user,
            )  # fmt: skip
            kept = service.benchmark_runs.values_list("pk", flat=True)[:MAX_KEPT_RUNS]
            service.benchmark_runs.exclude(pk__in=list(kept)).delete()
        return Response(as_json(stored), status=status.HTTP_201_CREATED)
