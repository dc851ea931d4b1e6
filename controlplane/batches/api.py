"""The workspace's batches in the REST API, for the console and anyone with an API token or a
session (the callers' own face of them is OpenAI's Batch API on the gateway, with an API key:
controlplane.batches.internal):

    GET  /api/v1/batches                 newest first, a page at a time (?status=, ?limit, ?after)
    GET  /api/v1/batches/<id>            OpenAI's batch object
    GET  /api/v1/batches/<id>/errors     its first error lines (?limit)
    POST /api/v1/batches/<id>/cancel     developer and up; 409 once it has ended
    GET  /api/v1/files/<id>/content      a batch's input, output or error file, as a download

Each answer is OpenAI's object from the gateway's own serializer (internal.batch_object, whose
`request_counts` count a running batch's answers so far), with one addition, `services`: the
services its requests still wait or run on. Another workspace's batch or file is a 404, as one
that does not exist.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import islice
from typing import Any

from django.db.models import Q, QuerySet
from django.http import StreamingHttpResponse
from django.utils.http import content_disposition_header
from rest_framework import status as http
from rest_framework.exceptions import APIException, NotFound, ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts import batch as contract
from controlplane import paging
from controlplane.batches import files, store
from controlplane.batches.internal import batch_object
from controlplane.batches.models import Batch, File
from controlplane.queues.store import QueueRefusal
from controlplane.workspaces.access import in_workspace
from controlplane.workspaces.roles import WRITE

STATUSES = tuple(contract.MOVES)  # every status a batch may have
# Set only when a batch settles, which deletes its items (an expired batch's may still run).
SETTLED = frozenset({contract.COMPLETED, contract.FAILED, contract.CANCELLED})
ERROR_LINES = 100  # error lines shown unless ?limit says otherwise
MAX_ERROR_LINES = 1000


def shown(batch: Batch) -> dict[str, Any]:
    """OpenAI's batch object and Wharf's `services`: those its requests wait or run on (none
    once it has ended)."""
    return {**batch_object(batch), "services": _services(batch)}


def _services(batch: Batch) -> list[str]:
    if batch.status in SETTLED:  # settling took its last items
        return []
    names = batch.items.order_by().values_list("service__name", flat=True).distinct()
    return sorted(names)


def visible_batches(request: Request) -> QuerySet[Batch]:
    store.expire_due()  # a batch past its window shows as expired, as the gateway's answer
    return in_workspace(request, Batch.objects.all())


def _batch(request: Request, batch_id: str) -> Batch:
    found = visible_batches(request).filter(id=batch_id).first()
    if found is None:
        raise NotFound(f"no batch {batch_id!r} in this workspace")
    return found


def newest_first(rows: QuerySet[Batch], page: paging.PageAsked) -> paging.Page:
    """A page of batches, newest first: those created before the batch `after` (keyset on
    created_at, then id, as the models order them), so pages never skip or repeat a row."""
    total = rows.count()
    ordered = rows.order_by("-created_at", "-id")
    if page.after:
        last = rows.filter(id=page.after).first()
        if last is None:
            raise ParseError({"after": ["no such batch: the last id of the page before"]})
        ordered = ordered.filter(
            Q(created_at__lt=last.created_at) | Q(created_at=last.created_at, id__lt=last.id)
        )
    items = list(ordered[: page.limit + 1])
    more = len(items) > page.limit
    items = items[: page.limit]
    return paging.Page(items, total, items[-1].id if more and items else None)


class BatchList(APIView):
    def get(self, request: Request) -> Response:
        wanted = paging.asked(request.query_params)
        rows = visible_batches(request)
        chosen = request.query_params.get("status")
        if chosen:
            if chosen not in STATUSES:
                raise ParseError({"status": [f"one of {', '.join(STATUSES)}"]})
            rows = rows.filter(status=chosen)
        page = newest_first(rows, wanted)
        return paging.paged(request, page, [shown(batch) for batch in page.items])


class BatchDetail(APIView):
    def get(self, request: Request, batch_id: str) -> Response:
        return Response(shown(_batch(request, batch_id)))


class BatchCancel(APIView):
    rights = {"POST": WRITE}

    def post(self, request: Request, batch_id: str) -> Response:
        batch = _batch(request, batch_id)
        if not contract.may_move(batch.status, contract.CANCELLING):
            return Response(
                {"detail": f"batch {batch.id} is {batch.status}: only a batch that is "
                 "validating or in progress can be cancelled",
                 "errors": {"status": [batch.status]}},
                status=http.HTTP_409_CONFLICT,
            )  # fmt: skip
        return Response(shown(store.cancel(batch)))


def _error_limit(request: Request) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return ERROR_LINES
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_ERROR_LINES):
        raise ParseError({"limit": [f"a whole number from 1 to {MAX_ERROR_LINES}"]})
    return int(raw)


def first_error_lines(batch: Batch, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """Its error file's first `limit` lines once it has one; before that, the input lines
    that could not run (the rest is known when it settles)."""
    if not batch.error_file_id:
        return batch.rejected[:limit], len(batch.rejected) > limit
    file = File.objects.filter(id=batch.error_file_id).first()
    if file is None:
        return [], False
    texts = _lines(_content(file).chunks)
    read = [json.loads(text) for text in islice(texts, limit + 1)]
    return read[:limit], len(read) > limit


def _lines(chunks: Iterator[bytes]) -> Iterator[str]:
    """The non-blank lines of a stream of chunks, read only as far as they are taken."""
    rest = b""
    for chunk in chunks:
        *whole, rest = (rest + chunk).split(b"\n")
        yield from (line.decode(errors="replace") for line in whole if line.strip())
    if rest.strip():
        yield rest.decode(errors="replace")


def _content(file: File) -> files.Content:
    try:
        return store.content_of(file)
    except QueueRefusal as exc:  # gone from the store (404), or the store down (503)
        raise StoreDown(exc.message) if exc.status >= 500 else NotFound(exc.message) from exc


class StoreDown(APIException):
    status_code = 503
    default_code = "store_unavailable"


class BatchErrors(APIView):
    def get(self, request: Request, batch_id: str) -> Response:
        limit = _error_limit(request)
        lines, more = first_error_lines(_batch(request, batch_id), limit)
        return Response({"object": "list", "data": lines, "has_more": more})


class FileContent(APIView):
    """A batch file as a download (the gateway's /v1/files/<id>/content, for the console)."""

    def get(self, request: Request, file_id: str) -> StreamingHttpResponse:
        file = in_workspace(request, File.objects.all()).filter(id=file_id).first()
        if file is None:
            raise NotFound(f"no file {file_id!r} in this workspace")
        content = _content(file)
        response = StreamingHttpResponse(content.chunks, content_type="application/jsonl")
        response["Content-Length"] = str(content.size)
        response["Content-Disposition"] = content_disposition_header(True, file.filename)
        return response
