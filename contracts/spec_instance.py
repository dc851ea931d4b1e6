"""EAS's settings of how an instance runs and is placed, beyond the core of `metadata`
(contracts.spec.Metadata mixes these in; metadata.rpc's are RpcLifecycle, metadata.scheduling
is Scheduling):

- `disk` ("40Gi"): the instance's ephemeral disk, reserved on its node at placement (nodes
  report the size of the disk their instances write to) and, on Kubernetes, its
  ephemeral-storage request and limit;
- `qos`: "" (or "Guaranteed") reserves `cpu` cores at placement; "BestEffort" reserves none,
  so instances share the node's CPUs, `cpu` staying each one's cap;
- `gpu_memory`, `gpu_core_percentage`: EAS's GPU slicing. Wharf gives whole cards: an instance
  asking for a slice gets one card of its own, and the answer says so (`notes`);
- `enable_crash_block`: an instance whose engine exits is kept as it ended (stopped, with its
  logs) for inspection, not restarted; the service shows failed until it is updated or
  restarted;
- `enable_grpc`: Wharf's gateway relays HTTP/1.1 (and WebSockets), not gRPC: true is taken
  with a warning saying so (HTTP calls are relayed as ever);
- `rpc.enable_sigterm`: the engine gets SIGTERM the moment its instance starts draining (it
  leaves routing at once), rather than after its requests finish;
- `scheduling.spread.policy`: "host" puts at most one instance of the service on a node;
  "zone" spreads them over the nodes' zones (label `zone`, else
  `topology.kubernetes.io/zone`) first; "default" prefers the nodes with the fewest.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from contracts.spec_fleet import _Strict

# EAS's other kinds of service (metadata.type) and why Wharf does not run them as such.
SERVICE_KINDS = {
    "Queue": "queue services are not available in Wharf yet",
    "LLMGatewayService": "Wharf's gateway is the LLM router: deploy the engines as services",
    "LLM": "give the engine in the llm section",
    "SDCluster": "deploy the web UI as a Standard service with enable_webservice",
    "RAG": "deploy each part as a Standard service",
    "serverless": "Wharf's services scale to zero with autoscaler min 0",
}

# For the spec hash: what of these changes no instance (the agent, the gateway and the answer
# act on them), and what shapes one only once set (so earlier hashes stay as they were).
UNSHAPING = ("gpu_memory", "gpu_core_percentage", "enable_crash_block", "enable_grpc", "type")
SHAPING_UNLESS = {"disk": (None,), "qos": ("",),
                  "scheduling": (None, {"spread": {"policy": "default"}})}  # fmt: skip

# EAS writes disks as Kubernetes quantities: "40Gi", "100G", "512Mi", "1Ti"; a bare number is GiB.
DISK = re.compile(r"^(\d{1,7})\s*(Ti|Gi|Mi|T|G|M)?$")
MB = {"Ti": 1024 * 1024, "Gi": 1024, "Mi": 1, "T": 1_000_000 / 1.048576, "G": 1000 / 1.048576,
      "M": 1 / 1.048576, None: 1024}  # fmt: skip
MAX_DISK_MB = 16 * 1024 * 1024


def disk_mb(text: str) -> int:
    """A disk size as EAS writes it, in MiB (rounded up)."""
    match = DISK.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a size such as 40Gi, 500Mi or 1Ti")
    size = int(-(-int(match[1]) * MB[match[2]] // 1))
    if not 0 < size <= MAX_DISK_MB:
        raise ValueError(f"{text!r}: between 1Mi and {MAX_DISK_MB // (1024 * 1024)}Ti")
    return size


class Spread(_Strict):
    policy: Literal["default", "host", "zone"] = "default"


class Scheduling(_Strict):
    spread: Spread = Spread()


class InstanceSettings(_Strict):
    scheduling: Scheduling | None = Field(
        default=None,
        description="spread.policy: host (at most one instance per node), zone (across the "
        "nodes' zones first) or default (the nodes with the fewest first).",
    )
    disk: str | None = Field(
        default=None, max_length=16,
        description="Ephemeral disk, e.g. 40Gi: reserved on the node; on Kubernetes the "
        "ephemeral-storage request and limit.",
    )  # fmt: skip
    qos: Literal["", "Guaranteed", "BestEffort"] = Field(
        default="",
        description="BestEffort: no CPU reserved at placement (instances share the node's "
        "CPUs; cpu is each one's cap).",
    )
    gpu_memory: int | None = Field(
        default=None, ge=1, le=1024,
        description="EAS GPU slicing (GB of one card): Wharf gives a whole card instead.",
    )  # fmt: skip
    gpu_core_percentage: int | None = Field(
        default=None, ge=1, le=100,
        description="EAS GPU slicing (percent of one card): Wharf gives a whole card instead.",
    )  # fmt: skip
    type: str | None = Field(
        default=None,
        max_length=32,
        description="EAS's service kind: Standard, or Async (an input and a sink queue in "
        "front of the instances; contracts.spec_queue).",
    )
    enable_crash_block: bool = Field(
        default=False,
        description="Keep an instance whose engine exits as it ended, for inspection, rather "
        "than restarting it.",
    )
    enable_grpc: bool = Field(
        default=False,
        description="The gateway relays HTTP/1.1 and WebSockets: with true, gRPC calls are "
        "not relayed (a warning says so); HTTP calls are, as ever.",
    )

    @field_validator("type")
    @classmethod
    def _type(cls, value: str | None) -> str | None:
        if value is not None and value not in ("Standard", "Async"):
            why = SERVICE_KINDS.get(value, "not a kind of service EAS documents")
            raise ValueError(f"{value!r}: {why}; Wharf runs Standard and Async services")
        return value

    @field_validator("disk")
    @classmethod
    def _disk(cls, value: str | None) -> str | None:
        if value is not None:
            disk_mb(value)
        return value

    @model_validator(mode="after")
    def _slice(self) -> InstanceSettings:
        if self.gpu_core_percentage is not None and self.gpu_memory is None:
            raise ValueError("gpu_core_percentage slices a card with gpu_memory: give both")
        return self

    def whole_cards(self, gpu: int, npu: int) -> int:
        """The GPUs an instance gets: `gpu`, or one whole card for a slice of one."""
        return 1 if self.gpu_memory is not None and not gpu and not npu else gpu

    @property
    def disk_mb(self) -> int:
        return disk_mb(self.disk) if self.disk else 0


class RpcLifecycle(_Strict):
    enable_sigterm: bool = Field(
        default=False,
        description="SIGTERM to the engine as soon as its instance starts draining.",
    )


def notes(data: dict) -> list[dict[str, str]]:
    """`{"field", "message"}` for what canonical spec `data` asks that Wharf does otherwise."""
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else None
    if not metadata:
        return []
    found = []
    for name in ("gpu_memory", "gpu_core_percentage"):
        if metadata.get(name) is not None:
            found.append(
                {
                    "field": f"metadata.{name}",
                    "message": (
                        "Wharf does not slice cards: each instance gets one whole card of its own"
                        + (" (metadata.gpu is set: it decides)" if metadata.get("gpu") else "")
                    ),
                }
            )
    if metadata.get("enable_grpc") is True:
        found.append({"field": "metadata.enable_grpc", "message": "Wharf's gateway relays "
                      "HTTP/1.1 and WebSockets, not gRPC (HTTP/2): gRPC calls do not reach the "
                      "container; its HTTP calls do"})  # fmt: skip
    return found
