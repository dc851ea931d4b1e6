"""OpenAI's /v1/files and /v1/batches, for the gateways only (the plane key,
contracts.plane_link): the gateway authenticates the caller's API key and relays the call here
with its id (CALLER_KEY); files and batches are that key's workspace's, another workspace's are
404 as OpenAI answers an id it does not know."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from functools import wraps
from typing import Any

from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from contracts import batch as contract
from contracts.plane_link import CALLER_KEY
from controlplane.batches import store
from controlplane.batches.models import Batch, File
from controlplane.queues.internal import _allowed
from controlplane.queues.models import QueueName
from controlplane.queues.store import QueueRefusal
from controlplane.tokens.models import ApiKey

PAGE = 20


def _error(status: int, message: str, param: str | None = None) -> JsonResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JsonResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": None}}, status=status
    )


def _seconds(when: datetime | None) -> int | None:
    return int(when.timestamp()) if when else None


def file_object(file: File) -> dict[str, Any]:
    return {
        "id": file.id, "object": "file", "bytes": file.bytes,
        "created_at": _seconds(file.created_at), "filename": file.filename,
        "purpose": file.purpose, "status": "processed", "status_details": None,
        "expires_at": None,
    }  # fmt: skip


def batch_object(batch: Batch) -> dict[str, Any]:
    times = ("created_at", "in_progress_at", "expires_at", "finalizing_at", "completed_at",
             "failed_at", "expired_at", "cancelling_at", "cancelled_at")  # fmt: skip
    return {
        "id": batch.id, "object": "batch", "endpoint": batch.endpoint,
        "errors": {"object": "list", "data": batch.line_errors} if batch.line_errors else None,
        "input_file_id": batch.input_file_id, "completion_window": batch.completion_window,
        "status": batch.status, "output_file_id": batch.output_file_id or None,
        "error_file_id": batch.error_file_id or None,
        **{name: _seconds(getattr(batch, name)) for name in times},
        "request_counts": request_counts(batch),
        "metadata": batch.metadata,
    }  # fmt: skip


def request_counts(batch: Batch) -> dict[str, int]:
    """OpenAI's request_counts. The stored counts are written when a batch settles; until then,
    its answers so far (a status code under 400 completed, any other failed, as settling counts
    them) and the input lines that could not run, which failed before anything ran."""
    if batch.status in contract.TERMINAL or batch._state.adding:  # settled, or not saved
        return {"total": batch.total, "completed": batch.completed, "failed": batch.failed}
    codes = batch.items.filter(queue=QueueName.SINK).aggregate(
        ok=Count("id", filter=Q(status__lt=400)), failed=Count("id", filter=Q(status__gte=400))
    )
    return {"total": batch.total, "completed": codes["ok"],
            "failed": codes["failed"] + len(batch.rejected)}  # fmt: skip


def _page(
    request: HttpRequest, queryset: Any, shape: Callable[[Any], dict[str, Any]]
) -> JsonResponse:
    """One page of OpenAI's list: `limit` (20) after the id `after`, newest first."""
    limit = _limit(request)
    found = list(_after(queryset, request)[: limit + 1])
    objects = [shape(row) for row in found[:limit]]
    return JsonResponse({"object": "list", "data": objects,
                         "first_id": objects[0]["id"] if objects else None,
                         "last_id": objects[-1]["id"] if objects else None,
                         "has_more": len(found) > limit})  # fmt: skip


def _relayed(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The plane key checked, the caller's key found; a refusal answered in OpenAI's shape."""

    @csrf_exempt
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not _allowed(request):
            return _error(403, "the control plane's internal routes are for the gateways")
        try:
            key = store.key_of(request.headers.get(CALLER_KEY, ""))
            return view(request, key, *args, **kwargs)
        except QueueRefusal as exc:
            return _error(exc.status, exc.message, exc.param or None)

    return wrapped


def _limit(request: HttpRequest) -> int:
    try:
        return max(1, min(int(request.GET.get("limit") or PAGE), 10_000))
    except ValueError as exc:
        raise QueueRefusal(400, "limit: a number") from exc


def _after(queryset: Any, request: HttpRequest) -> Any:
    after = request.GET.get("after")
    if after:
        found = queryset.filter(id=after).first()
        if found is not None:
            queryset = queryset.filter(created_at__lte=found.created_at).exclude(id=after)
    return queryset


@_relayed
def files(request: HttpRequest, key: ApiKey) -> HttpResponse:
    if request.method == "POST":
        upload = request.FILES.get("file")
        if upload is None:
            return _error(400, "file: a multipart upload is required", "file")
        name = upload.name or "input.jsonl"
        return JsonResponse(
            file_object(store.save_file(key, name, request.POST.get("purpose", ""), upload))
        )
    found = File.objects.filter(workspace=key.workspace)
    if request.GET.get("purpose"):
        found = found.filter(purpose=request.GET["purpose"])
    return _page(request, found, file_object)


@_relayed
def one_file(request: HttpRequest, key: ApiKey, file_id: str) -> HttpResponse:
    file = store.file_of(key, file_id)
    if request.method == "DELETE":
        store.delete_file(file)
        return JsonResponse({"id": file_id, "object": "file", "deleted": True})
    return JsonResponse(file_object(file))


@_relayed
def file_content(request: HttpRequest, key: ApiKey, file_id: str) -> HttpResponse:
    """Streamed from the store as it reads (a bucket's body chunk by chunk)."""
    content = store.content_of(store.file_of(key, file_id))
    response = StreamingHttpResponse(content.chunks, content_type="application/jsonl")
    response["Content-Length"] = str(content.size)
    return response


@_relayed
def batches(request: HttpRequest, key: ApiKey) -> HttpResponse:
    store.expire_due()
    if request.method == "POST":
        try:
            data = json.loads(request.body or b"{}")
        except ValueError:
            return _error(400, "the body is not JSON")
        if not isinstance(data, dict) or not isinstance(data.get("input_file_id"), str):
            return _error(400, "input_file_id: required", "input_file_id")
        endpoint, window = str(data.get("endpoint", "")), str(data.get("completion_window", ""))
        batch = store.create_batch(
            key, data["input_file_id"], endpoint, window, data.get("metadata")
        )
        return JsonResponse(batch_object(batch))
    return _page(request, Batch.objects.filter(workspace=key.workspace), batch_object)


def _batch(key: ApiKey, batch_id: str) -> Batch:
    batch = Batch.objects.filter(id=batch_id, workspace=key.workspace).first()
    if batch is None:
        raise QueueRefusal(404, f"No such Batch object: {batch_id}")
    return batch


@_relayed
def one_batch(request: HttpRequest, key: ApiKey, batch_id: str) -> HttpResponse:
    store.expire_due()
    return JsonResponse(batch_object(_batch(key, batch_id)))


@_relayed
def cancel(request: HttpRequest, key: ApiKey, batch_id: str) -> HttpResponse:
    return JsonResponse(batch_object(store.cancel(_batch(key, batch_id))))
