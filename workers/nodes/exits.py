"""How an instance whose engine ended, or failed its checks for good, leaves: into back-off
before its restart, or kept as it ended (the spec's enable_crash_block)."""

from __future__ import annotations

from datetime import timedelta

from contracts.spec_job import is_job
from controlplane.services.choices import InstanceState
from controlplane.services.events import record
from controlplane.services.models import Instance
from workers.fleet import wake
from workers.runtimes import Runtime
from workers.scheduling import gangs

LOG_TAIL = 15  # log lines kept with an exit event


def spec_of(row: Instance):
    """The service's spec as stored now; None when it no longer parses."""
    try:
        return row.service.parsed_spec()
    except Exception:  # a spec stored before a rule tightened: the defaults
        return None


def crashed(row: Instance, runtime: Runtime, fleet, now, why: str, logs: bool = True) -> None:
    """Into back-off: the restart waits 10 s, doubling to 5 min; an engine that stayed up
    10 minutes starts over from 10 s (a job's retries add up: workers.nodes.jobs). The event keeps
    its last log lines. With the spec's enable_crash_block, kept as it ended instead (failed,
    its container and logs left)."""
    tail = runtime.logs(row.name, tail=LOG_TAIL).strip() if logs else ""
    spec = spec_of(row)
    if spec is not None and spec.metadata.enable_crash_block:
        _crash_blocked(row, why, tail)
        return
    up = (now - row.started_at).total_seconds() if row.started_at else 0.0
    restarts = 1 if up >= fleet.backoff_reset and not is_job(spec) else row.restarts + 1
    delay = fleet.backoff(restarts)
    message = f"{why}; restart {restarts} in {delay:.0f} s"
    # Never over a drain the scheduler wrote since this row was read: it stays draining.
    backoff = Instance.objects.filter(pk=row.pk).exclude(state=InstanceState.DRAINING).update(
        state=InstanceState.BACKOFF, restarts=restarts, message=message, url="",
        restart_at=now + timedelta(seconds=delay), ready_since=None, probe_failures=0,
        probe_successes=0, liveness_failures=0, probed_at=None,
    )  # fmt: skip
    if not backoff:
        return
    record(row.service, "InstanceExited", message + (f"; last log lines:\n{tail}" if tail else ""),
           row.name)  # fmt: skip
    wake(gangs.fail_together(row, restarts, now + timedelta(seconds=delay), why))  # whole


def _crash_blocked(row: Instance, why: str, tail: str) -> None:
    message = (
        f"{why}; kept as it ended (runtime.enable_crash_block), not restarted: read "
        "its logs, then update the service (or stop and start it) to start it again"
    )
    blocked = (
        Instance.objects.filter(pk=row.pk)
        .exclude(state=InstanceState.DRAINING)
        .update(state=InstanceState.FAILED, message=message, url="", ready_since=None)
    )
    if blocked:
        gangs.fail_all(row, why)
        record(row.service, "InstanceCrashBlocked",
               message + (f"; last log lines:\n{tail}" if tail else ""), row.name)  # fmt: skip
