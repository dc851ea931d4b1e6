"""The benchmark views in the OpenAPI schema: request and answer shapes generated from the
figures' names (validation.py), so the schema and the checks cannot drift apart.
controlplane/openapi.py calls describe_benchmark_views from its describe_views."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import OpenApiParameter

from contracts.node_tokenizer import TOKENIZER, TOKENIZER_FILES
from controlplane.benchmarks import validation
from controlplane.benchmarks.api.runs import MAX_LIMIT, BenchmarkRuns
from controlplane.benchmarks.api.tokenizer import ServiceTokenizer

NUMBER = {"type": "number", "minimum": 0}
COUNT = {"type": "integer", "minimum": 0}
POINTS: dict[str, Any] = {
    "parallel_num": {"type": "integer", "minimum": 1, "description": "static: concurrency"},
    "prompt_tokens": {"type": "integer", "minimum": 1, "description": "static"},
    "output_tokens": {"type": "integer", "minimum": 1, "description": "static"},
    "request_rate": {"type": "number", "exclusiveMinimum": 0, "description": "dynamic: req/s"},
    "num_prompts": {"type": "integer", "minimum": 1, "description": "dynamic"},
}


def _figure(name: str) -> dict[str, Any]:
    if name in validation.COUNT_FIGURES:
        return COUNT
    if name in validation.NULLABLE_FIGURES:
        return {"type": ["number", "null"], "minimum": 0}
    return NUMBER


ROW = {
    "type": "object",
    "additionalProperties": False,
    "description": "one point: its fields (static: parallel_num, prompt_tokens, output_tokens; "
    "dynamic: request_rate, num_prompts) and every figure; times in ms",
    "required": list(validation.FIGURES),
    "properties": {**POINTS, **{name: _figure(name) for name in validation.FIGURES}},
}
RUN_REQUEST = {
    "type": "object",
    "additionalProperties": False,
    "required": list(validation.BODY_FIELDS),
    "properties": {
        "kind": {"type": "string", "enum": list(validation.KINDS)},
        "parameters": {"type": "object", "maxProperties": validation.MAX_PARAMETERS,
                       "description": "the options the run used (flat: scalars or lists)"},
        "rows": {"type": "array", "items": ROW, "minItems": 1, "maxItems": validation.MAX_ROWS},
    },
}  # fmt: skip
RUN = {
    "type": "object",
    "properties": {
        **RUN_REQUEST["properties"],  # type: ignore[dict-item]
        "id": {"type": "integer"},
        "service": {"type": "string"},
        "created_at": {"type": "string", "format": "date-time"},
        "created_by": {"type": ["string", "null"], "description": "who posted it"},
    },
}
TOKENIZER_ANSWER = {
    "type": "object",
    "properties": {
        "model": {"type": "string", "description": "the service's llm.model"},
        "node": {"type": ["string", "null"],
                 "description": "the node that read them; null: the API host's model store"},
        "files": {"type": "object", "required": [TOKENIZER], "additionalProperties": False,
                  "description": "file name -> text (only these names, each size-capped)",
                  "properties": {name: {"type": "string"} for name in TOKENIZER_FILES}},
    },
}  # fmt: skip


def describe_benchmark_views(view: Callable, op: Callable, errors: dict) -> None:
    """`view` is extend_schema_view, `op` openapi._op, `errors` its error-body schema."""
    view(
        get=op("services_benchmarks_list", "A service's benchmark runs, newest first",
               responses={200: {"type": "array", "items": RUN}},
               parameters=[OpenApiParameter("limit", int, description=f"1 to {MAX_LIMIT}"),
                           OpenApiParameter("kind", str, enum=list(validation.KINDS))]),
        post=op("services_benchmarks_create", "Store a benchmark run (`wharf bench`)",
                request={"application/json": RUN_REQUEST}, responses={201: RUN}),
    )(BenchmarkRuns)  # fmt: skip
    view(get=op("services_tokenizer", "The tokenizer files of the service's model, read on a "
                "node that runs it (404: none to give; 504: its node did not answer)",
                responses={200: TOKENIZER_ANSWER, 404: errors, 504: errors}),
         )(ServiceTokenizer)  # fmt: skip
