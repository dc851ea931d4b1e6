"""The scheduler's pure core for status: what phase a service's counts mean, and instance names.

A service's instances have a role: "" for an ordinary service, "prefill" and "decode" for a
prefill/decode-separated one. Each role is planned on its own (workers.scheduling.rollout), so
scaling one role leaves the other alone.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass


def instance_name(service: str, role: str = "") -> str:
    infix = f"{role[0]}-" if role else ""  # svc-p-1a2b3c, svc-d-4d5e6f
    return f"{service}-{infix}{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Status:
    phase: str
    progress: str


def _counts(replicas: dict[str, int], ready: dict[str, int]) -> str:
    if list(replicas) == [""]:
        return f"{ready.get('', 0)}/{replicas['']} instances ready"
    return ", ".join(f"{role} {ready.get(role, 0)}/{n} ready" for role, n in replicas.items())


def status(
    desired_state: str,
    replicas: dict[str, int],
    ready: dict[str, int],
    running: int,
    previous_phase: str,
    failed: bool,
    waiting: str | None = None,
    updating: bool = False,
    paused: str = "",
    notes: list[str] | None = None,
    previous: int = 0,
    starting: int = 0,
) -> Status:
    """The service phase from counts alone, so it can be recomputed on any pass.

    An ordinary service is running when every replica is ready. A prefill/decode service is
    running as soon as each role has a ready instance (requests need one of each, as the
    seeds' scheduler does), and degraded when a role has none. `ready` counts the current
    version's instances; `previous` is how many of an earlier version still serve (a rollout);
    `starting` how many new ones start for the first time (a scale-up: a running service
    stays running while they start, rather than looking degraded).
    """
    if desired_state == "deleted":
        return Status("deleting", f"removing {running} instance(s)")
    if desired_state == "stopped":
        if running:
            return Status("stopping", f"removing {running} instance(s)")
        return Status("stopped", "stopped")
    counts = _counts(replicas, ready)
    if previous:
        counts += f" ({previous} of the previous version serving)"
    if notes:  # instances in back-off, with when they restart
        counts += "; " + "; ".join(notes)
    complete = all(ready.get(role, 0) >= n for role, n in replicas.items())
    if list(replicas) == [""]:
        serving = complete
    else:
        serving = all(ready.get(role, 0) >= 1 for role, n in replicas.items() if n)
    if paused:  # before failed: the previous version still serves
        return Status("updating", f"{counts}; rollout paused: {paused}")
    if failed:
        return Status("failed", counts)
    if waiting and not complete:
        phase = "updating" if updating and previous_phase != "pending" else "pending"
        return Status(phase, f"{counts}; waiting: {waiting}")
    if updating:
        return Status("updating", f"{counts}; rolling out the new version")
    if serving:
        return Status("running", counts)
    wanted, have = sum(replicas.values()), sum(ready.values())
    if previous_phase == "running" and starting and have and have + starting >= wanted:
        return Status("running", f"{counts}; {starting} starting")
    if previous_phase in ("running", "degraded"):
        missing = [role for role in replicas if role and not ready.get(role, 0)]
        why = f"; no ready {' or '.join(missing)} instance" if missing else ""
        return Status("degraded", counts + why)
    return Status("deploying", f"{counts}; waiting for the engine's health check")


def job_status(
    wanted: int,
    succeeded: int,
    running: int,
    failed: bool,
    waiting: str | None = None,
    notes: list[str] | None = None,
) -> Status:
    """A running job's phase (metadata.workload_type; contracts.spec_job) from the counts of
    its current instances: `completed` once `wanted` have succeeded, `failed` once one has
    spent its retries, else `running` while any runs, is done or waits for a retry
    (`notes` name those), `pending` while one waits for a node. Stopping and deleting are
    `status`'s."""
    counts = f"{succeeded}/{wanted} instances succeeded"
    if running:
        counts += f"; {running} running"
    if notes:  # instances in back-off, with when they run again
        counts += "; " + "; ".join(notes)
    if failed:
        return Status("failed", counts)
    if succeeded >= wanted:
        return Status("completed", counts)
    if waiting:
        return Status("pending", f"{counts}; waiting: {waiting}")
    if running or succeeded or notes:  # notes: runs that failed, to be retried
        return Status("running", counts)
    return Status("deploying", f"{counts}; starting")
