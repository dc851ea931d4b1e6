"""The metrics views' answers in the OpenAPI schema."""

from __future__ import annotations

from typing import Any

from contracts import engine_load
from controlplane.metrics.samples import POINT_FIELDS

NUMBER = {"type": "number"}
SAMPLE: dict[str, Any] = {
    "type": ["object", "null"],
    "description": "the newest sample (null when none is fresh): gauges, and counters since "
    "the engine started; a field the engine does not report is absent",
    "properties": {"at": {"type": "number", "description": "unix seconds"},
                   **{field: NUMBER for field in engine_load.FIELDS}},
}  # fmt: skip
RATES = {
    "type": "object",
    "description": "over about the last minute; absent when nothing moved",
    "properties": {name: NUMBER for name in (
        "prefix_hit_rate", "ttft", "itl", "prompt_tps", "generation_tps", "spec_acceptance")},
}  # fmt: skip
POINT = {
    "type": "object",
    "properties": {"time": {"type": "number", "description": "unix seconds"},
                   **{field: {"type": ["number", "null"]} for field in POINT_FIELDS}},
}  # fmt: skip
SERVICE_METRICS = {
    "type": "object",
    "properties": {
        "service": {"type": "string"},
        "interval": {"type": "number", "description": "seconds between two scrapes"},
        "instances": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "role": {"type": "string"},
            "node": {"type": "string"}, "state": {"type": "string"},
            "latest": SAMPLE, "rates": RATES,
            "series": {"type": "array", "items": POINT, "description": "oldest first"},
        }}},
    },
}  # fmt: skip
SD_GROUPS = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "targets": {"type": "array", "items": {"type": "string"}, "description": "host:port"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"},
                       "description": "__scheme__, __metrics_path__, wharf_service, "
                       "wharf_instance, wharf_role, wharf_node, wharf_workspace"},
        },
    },
}  # fmt: skip
