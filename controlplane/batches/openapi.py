"""The batch views in the OpenAPI schema; controlplane/openapi.py calls describe_batch_views
from its describe_views. The batch object's properties are read from the gateway's own
serializer (internal.batch_object), so the schema names the fields the API answers with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter

from controlplane import paging
from controlplane.batches import api
from controlplane.batches.internal import batch_object
from controlplane.batches.models import Batch

BATCH = {
    "type": "object",
    "description": "OpenAI's batch object; while it runs, request_counts count the answers so far",
    "properties": {
        **{name: {} for name in batch_object(Batch(id="", total=0))},
        "services": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Wharf's: the services its requests wait or run on",
        },
    },  # fmt: skip
}
LINES = {
    "type": "array",
    "items": {"type": "object"},
    "description": "OpenAI's error-file lines: custom_id, error {code, message}",
}
ERROR_LINES = {"type": "object", "properties": {
    "object": {"const": "list"}, "has_more": {"type": "boolean"}, "data": LINES}}  # fmt: skip
PAGE = [
    OpenApiParameter("limit", int, description=f"rows per page, 1 to {paging.MAX_LIMIT} "
                     f"(default {paging.DEFAULT_LIMIT})"),
    OpenApiParameter("after", str, description="the last id of the page before; the answer's "
                     "Link header (rel=next) gives the next page's URL"),
]  # fmt: skip


def describe_batch_views(V: Callable, _op: Callable, errors: dict[str, Any]) -> None:  # noqa: N803
    V(get=_op("batches_list", "The workspace's batches, newest first, a page at a time",
              responses={200: {"type": "array", "items": BATCH}, 400: errors},
              parameters=[OpenApiParameter("status", str, enum=list(api.STATUSES)), *PAGE])
      )(api.BatchList)  # fmt: skip
    V(get=_op("batches_get", "A batch", responses={200: BATCH, 404: errors}))(api.BatchDetail)
    V(get=_op("batches_errors", "A batch's first error lines", responses={
        200: ERROR_LINES, 404: errors}, parameters=[OpenApiParameter(
            "limit", int, description=f"1 to {api.MAX_ERROR_LINES} (default {api.ERROR_LINES})")]),
      )(api.BatchErrors)  # fmt: skip
    V(post=_op("batches_cancel", "Cancel a batch: its waiting requests go, those in work finish",
               request=None, responses={200: BATCH, 404: errors, 409: errors}),
      )(api.BatchCancel)  # fmt: skip
    V(get=_op("files_content", "A batch's input, output or error file (JSON lines)",
              responses={(200, "application/jsonl"): OpenApiTypes.BINARY, 404: errors})
      )(api.FileContent)  # fmt: skip
