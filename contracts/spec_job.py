"""EAS's `metadata.workload_type: "elasticjob"`: the service is a one-off job rather than a
server. Pure; contracts.spec.Metadata mixes JobSettings in.

Each instance runs its command to the end. Exit 0: that instance has succeeded and is left
as it ended (not restarted, not replaced, its cards and CPUs free for others). Another exit
is retried with the usual back-off, at most WHARF_JOB_RETRIES times, and then the instance
has failed. When every instance has succeeded the service is `completed`, and it stays so
until it is deleted, or started again (`start`, or any update, runs it again). A job takes
no calls: it has no readiness checks and the gateway routes nothing to it (a call is a 409
naming the job). Kubernetes would run it as a Job; Wharf's Kubernetes runtime does not render
one yet, so there the field is refused by name (contracts.spec_rules.runtime_checks).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from contracts.spec_fleet import _Strict

ELASTIC_JOB = "elasticjob"
# For the spec hash: unset, earlier hashes stay as they were (contracts.spec.spec_hash).
JOB_SHAPING_UNLESS: dict[str, tuple[Any, ...]] = {"workload_type": (None,)}


class JobSettings(_Strict):
    workload_type: Literal["elasticjob"] | None = Field(
        default=None,
        description="elasticjob: run as a one-off job. Each instance runs its command to the "
        "end; exit 0 is done (kept, not restarted), another exit is retried with back-off up "
        "to WHARF_JOB_RETRIES times; once all have succeeded the service is completed. A job "
        "takes no calls. Start or update it to run it again.",
    )


def is_job(spec: Any) -> bool:
    """Whether `spec` (a ServiceSpec, or None) describes a job."""
    metadata = getattr(spec, "metadata", None)
    return getattr(metadata, "workload_type", None) == ELASTIC_JOB
