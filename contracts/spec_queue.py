"""EAS's asynchronous services: `metadata.type: "Async"` puts an input queue and a sink queue in
front of the instances, and the optional top-level `queue` block bounds them.

    "metadata": {"name": "sd_async", "type": "Async", "instance": 1, "rpc.worker_threads": 1},
    "queue": {"max_delivery": 1, "source": {"max_length": 1000}, "sink": {"max_length": 1000}}

A caller puts an item at `/api/predict/<svc>` and takes its answer from `/api/predict/<svc>/sink`
(EAS's queue API: contracts.queue_calls). The gateways feed the instances: each instance works on
at most its window of items at once (`window`), and an item whose instance dies while working on
it goes to another, `max_delivery` times in all; then its sink item holds the failure.

`queue.cpu`, `memory` and `resource` size EAS's queue sub-service, a cloud part: Wharf's queue is
its database, so they are kept and answered with a warning (`QUEUE_CLOUD`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from contracts.spec_fleet import MAX_STRING, _Strict

ASYNC = "Async"
DEFAULT_WINDOW = 5  # EAS's default rpc.worker_threads: items one instance works on at once
DEFAULT_MAX_LENGTH = 10_000  # items a queue holds unless the spec says otherwise
MAX_LENGTH = 1_000_000
DEFAULT_PAYLOAD_KB = 1024  # one item's body, KiB
MAX_PAYLOAD_KB = 8 * 1024
DEFAULT_MAX_DELIVERY = 5
QUEUE_CLOUD = {
    "cpu": "EAS sizes its queue sub-service with it; Wharf's queue is its database",
    "memory": "EAS sizes its queue sub-service with it; Wharf's queue is its database",
    "resource": "EAS places its queue sub-service in a resource group; Wharf's queue is its "
    "database",
}


class QueueSide(_Strict):
    """The input queue (`source`) or the sink: how many items it holds, how large each is."""

    max_length: int = Field(
        default=DEFAULT_MAX_LENGTH, ge=1, le=MAX_LENGTH,
        description="Items it holds at most: a full input queue refuses new items (429), a "
        "full sink stops the instances taking more until callers take answers out.",
    )  # fmt: skip
    max_payload_size_kb: int = Field(
        default=DEFAULT_PAYLOAD_KB, ge=1, le=MAX_PAYLOAD_KB,
        description="One item's body at most, KiB: a larger request is a 413; a larger answer "
        "lands in the sink as a 413 of its own.",
    )  # fmt: skip


class QueueSettings(_Strict):
    """The top-level `queue` of an Async service."""

    max_delivery: int = Field(
        default=DEFAULT_MAX_DELIVERY, ge=1, le=100,
        description="Times an item is handed to an instance: one whose instance died while "
        "working on it goes to another until then (1: never again); then its sink item holds "
        "the failure.",
    )  # fmt: skip
    source: QueueSide = QueueSide()
    sink: QueueSide = QueueSide()
    cpu: float | int | None = Field(default=None, ge=0, le=1024, description=QUEUE_CLOUD["cpu"])
    memory: int | None = Field(default=None, ge=0, le=10_000_000, description=QUEUE_CLOUD["memory"])
    resource: str | None = Field(
        default=None, max_length=MAX_STRING, description=QUEUE_CLOUD["resource"]
    )


class Queued(_Strict):
    """The service spec's `queue`, allowed with metadata.type Async only."""

    queue: QueueSettings | None = Field(
        default=None,
        description="Async services only: the input and sink queues' bounds and redelivery.",
    )


def queue_rules(spec: Any) -> dict[str, list[str]]:
    """The rules of an Async service that span sections (contracts.spec_rules)."""
    errors: dict[str, list[str]] = {}
    if spec.queue is not None and not is_async(spec):
        errors["queue"] = ['only an Async service (metadata.type "Async") has queues']
    if not is_async(spec):
        return errors
    if spec.llm is not None and spec.llm.pd is not None:
        errors["metadata.type"] = ["an Async service's items go to whole instances: give it no "
                                   "llm.pd (prefill/decode) section"]  # fmt: skip
    if spec.metadata.workload_type:
        errors["metadata.type"] = ["a job (metadata.workload_type) takes no calls, so it has "
                                   "no queues: leave type out"]  # fmt: skip
    return errors


def is_async(spec: Any) -> bool:
    """Whether a service spec is an Async one."""
    return getattr(spec.metadata, "type", None) == ASYNC


def queue_settings(spec: Any) -> QueueSettings:
    """An Async service's queue settings, defaults filled in."""
    return spec.queue or QueueSettings()


def window(spec: Any) -> int:
    """Items one instance of the service works on at once: metadata.rpc.worker_threads, else
    the engine's llm.max_num_seqs, else EAS's default of 5."""
    threads = getattr(spec.metadata.rpc, "worker_threads", None) if spec.metadata.rpc else None
    if threads:
        return int(threads)
    seqs = getattr(spec.llm, "max_num_seqs", None) if spec.llm else None
    return int(seqs) if seqs else DEFAULT_WINDOW


def queue_warnings(data: dict) -> list[dict[str, str]]:
    """`{"field", "message"}` for each cloud-only field of the queue block in canonical `data`."""
    queue = data.get("queue")
    if not isinstance(queue, dict):
        return []
    return [{"field": f"queue.{name}", "message": f"no effect here: {why}"}
            for name, why in QUEUE_CLOUD.items() if queue.get(name) not in (None, "")]  # fmt: skip
