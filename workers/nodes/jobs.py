"""A job's instances on their node (metadata.workload_type: elasticjob; contracts.spec_job).

A job's instance runs its command to the end, and its node's agent (workers.nodes.agent) asks this
module what the end means: exit 0 is `succeeded` (kept as it ended: not restarted, not
replaced, holding no cards or CPUs); another exit is retried after the usual back-off until
WHARF_JOB_RETRIES retries have been spent, and then the instance has `failed` (a new intent,
start or an update, runs the job again). The decision is the pure `outcome`.
"""

from __future__ import annotations

from enum import Enum

from controlplane.services.choices import InstanceState
from controlplane.services.events import record
from controlplane.services.models import Instance
from workers.runtimes import ObservedInstance, Runtime

LOG_TAIL = 15  # log lines kept with the event


class Outcome(Enum):
    SUCCEEDED = "succeeded"
    RETRY = "retry"  # into back-off, as any crash
    FAILED = "failed"


def outcome(exit_code: int | None, retries: int, limit: int) -> Outcome:
    """What an ended run of a job's instance means: `exit_code` None is an engine gone
    without one (removed, its node's runtime lost it), a failure like any other; `retries`
    are those already spent."""
    if exit_code == 0:
        return Outcome.SUCCEEDED
    return Outcome.FAILED if retries >= limit else Outcome.RETRY


def ended(
    row: Instance, found: ObservedInstance | None, runtime: Runtime, limit: int, why: str
) -> Outcome:
    """Record a job instance's end unless it is to be retried (then the caller's back-off
    does it). Never over a drain the scheduler wrote since `row` was read."""
    result = outcome(found.exit_code if found is not None else None, row.restarts, limit)
    if result is Outcome.RETRY:
        return result
    tail = runtime.logs(row.name, tail=LOG_TAIL).strip() if found is not None else ""
    if result is Outcome.SUCCEEDED:
        state, reason = InstanceState.SUCCEEDED, "InstanceSucceeded"
        message = "its command exited with code 0; done (a job: not restarted)"
    else:
        state, reason = InstanceState.FAILED, "InstanceFailed"
        message = (f"{why}; failed after {row.restarts} retries (WHARF_JOB_RETRIES={limit}): "
                   "start or update the service to run the job again")  # fmt: skip
    kept = (
        Instance.objects.filter(pk=row.pk)
        .exclude(state=InstanceState.DRAINING)
        .update(state=state, message=message, url="", ready_since=None)
    )
    if kept:
        record(row.service, reason, message + (f"; last log lines:\n{tail}" if tail else ""),
               row.name)  # fmt: skip
    return result
