"""EAS fields that mean something only on Alibaba Cloud: accepted, kept as given, acted on by
nothing, and answered with a warning saying why (`cloud_only_warnings`). A field in no EAS
document is still refused by name (the schema is strict).

Kept in the stored spec so that nothing a user sent is lost (and `?format=eas` gives it back);
left out of the spec hash (contracts.spec.ServiceSpec.spec_hash): they shape no instance.
The `unit` block's own (enable_c4d, enable_rebuild) are listed in contracts.spec_unit, beside
the unit.size Wharf acts on.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, field_validator

from contracts.service_groups import GroupTraffic
from contracts.spec_fleet import MAX_STRING, _Strict
from contracts.spec_gateway_policy import GatewayPolicied
from contracts.spec_queue import queue_warnings
from contracts.spec_unit import UNIT_CLOUD

MAX_KEPT = 64 * 1024  # bytes of JSON one kept object may hold

# Top-level fields, metadata fields and networking fields: each with why it has no effect.
TOP = {
    "cloud": "EAS's public resource pool (spot instances, its VPC, where instances run) is "
    "Alibaba Cloud's; here the nodes' own cards and the spec's metadata.cpu, memory and gpu "
    "decide, which an instance type it names fills in where unset (see the answer's notes)",
    "features": "EAS feature gates switch its own cloud services",
    "sinker": "EAS keeps requests in MaxCompute or SLS; Wharf keeps them, when asked, with "
    "`request_log` (enabled, keep_days)",
    "confidential": "confidential inference uses Alibaba Cloud's Trustee key service",
    "options": "these options switch EAS's cloud services (RAM roles, its caches)",
    "aimaster": "EAS's fault tolerance for Lingjun clusters",
    "role_arn": "a RAM role is Alibaba Cloud's identity; give storage entries their own keys",
}
METADATA = {
    "workspace_id": "a PAI workspace; the service belongs to the workspace of the API token "
    "that created it",
    "region": "EAS regions are Alibaba Cloud's; a service runs on the nodes Wharf placed it on",
    "quota_id": "Lingjun quotas are Alibaba Cloud's; workspace quotas apply here",
    "quota_type": "Lingjun quotas are Alibaba Cloud's; workspace quotas apply here",
    "resource_burstable": "EAS's elastic public pool; a service here stays on its nodes",
    "resource_rebalancing": "EAS's migration between its pools; a service here stays on its nodes",
    "cuda": "EAS mounts a CUDA version; here the image brings its own",
}
STORAGE = {
    "properties": "EAS's console reads it (resource_type: model, code) to label the mount",
}
# metadata.rpc fields of EAS's own request server, which an LLM engine does for itself.
RPC = {
    "batching": "LLM engines batch requests themselves, continuously and per token; EAS's "
    "batching is its processors' (and max_batch_size, max_batch_timeout with it)",
    "max_batch_size": "LLM engines batch requests themselves (llm.max_num_seqs bounds a batch)",
    "max_batch_timeout": "LLM engines batch requests themselves, with no wait to fill a batch",
    "io_threads": "Wharf's gateway does the network I/O; an engine's own threads are its own",
    "enable_jemalloc": "EAS's processors' allocator; an image brings its own",
}
NETWORKING = {
    "gateway": "a dedicated EAS gateway; Wharf's gateways serve every service",
    "nlb": "Alibaba Cloud's network load balancers; put yours in front of Wharf's gateways",
}


def _bounded(value: Any) -> Any:
    if value is not None and len(json.dumps(value)) > MAX_KEPT:
        raise ValueError(f"at most {MAX_KEPT} bytes of JSON")
    return value


class CloudOnlyTop(_Strict):
    """The top-level fields of TOP, on the service spec."""

    cloud: dict[str, Any] | None = Field(default=None, description=TOP["cloud"])
    features: dict[str, str] | None = Field(default=None, description=TOP["features"])
    sinker: dict[str, Any] | None = Field(default=None, description=TOP["sinker"])
    confidential: dict[str, Any] | None = Field(default=None, description=TOP["confidential"])
    options: dict[str, Any] | None = Field(default=None, description=TOP["options"])
    aimaster: dict[str, Any] | None = Field(default=None, description=TOP["aimaster"])
    role_arn: str | None = Field(default=None, max_length=MAX_STRING, description=TOP["role_arn"])

    @field_validator("cloud", "features", "sinker", "confidential", "options", "aimaster")
    @classmethod
    def _kept(cls, value: Any) -> Any:
        return _bounded(value)


class CloudOnlyMetadata(_Strict):
    """The metadata fields of METADATA."""

    workspace_id: str | int | None = Field(default=None, description=METADATA["workspace_id"])
    region: str | None = Field(default=None, max_length=64, description=METADATA["region"])
    quota_id: str | None = Field(default=None, max_length=MAX_STRING)
    quota_type: str | None = Field(default=None, max_length=MAX_STRING)
    resource_burstable: bool | None = Field(
        default=None, description=METADATA["resource_burstable"]
    )
    resource_rebalancing: bool | None = Field(default=None)
    cuda: str | None = Field(default=None, max_length=16, description=METADATA["cuda"])


class RpcNotes(_Strict):
    """The metadata.rpc fields of RPC."""

    batching: bool | None = Field(default=None, description=RPC["batching"])
    max_batch_size: int | None = Field(default=None, ge=1, le=100_000)
    max_batch_timeout: int | None = Field(default=None, ge=0, le=3_600_000, description="ms")
    io_threads: int | None = Field(default=None, ge=1, le=1024, description=RPC["io_threads"])
    enable_jemalloc: int | bool | None = Field(default=None)


class Networking(GatewayPolicied, GroupTraffic):
    """EAS's networking section: gateway_policy is acted on by the gateway
    (contracts.spec_gateway_policy), traffic_state by the service's group
    (contracts.service_groups); the rest is cloud-only (NETWORKING)."""

    gateway: str | None = Field(
        default=None, max_length=MAX_STRING, description=NETWORKING["gateway"]
    )
    nlb: list[dict[str, Any]] | None = Field(
        default=None, max_length=16, description=NETWORKING["nlb"]
    )

    @field_validator("nlb")
    @classmethod
    def _kept(cls, value: Any) -> Any:
        return _bounded(value)


def cloud_only_warnings(data: dict) -> list[dict[str, str]]:
    """`{"field", "message"}` for each cloud-only field set in canonical spec `data`."""
    found = []
    metadata: dict = data["metadata"] if isinstance(data.get("metadata"), dict) else {}
    places = ((TOP, data), (METADATA, metadata), (RPC, metadata.get("rpc")),
              (NETWORKING, data.get("networking")), (UNIT_CLOUD, data.get("unit")))  # fmt: skip
    prefixes = ("", "metadata.", "metadata.rpc.", "networking.", "unit.")
    for (table, where), prefix in zip(places, prefixes, strict=True):
        if not isinstance(where, dict):
            continue
        for name, why in table.items():
            if where.get(name) is not None:
                found.append({"field": prefix + name, "message": f"no effect here: {why}"})
    entries: list = data["storage"] if isinstance(data.get("storage"), list) else []
    for i, entry in enumerate(entries):
        for name, why in STORAGE.items():
            if isinstance(entry, dict) and entry.get(name) is not None:
                found.append({"field": f"storage[{i}].{name}", "message": f"no effect here: {why}"})
    return found + queue_warnings(data)
