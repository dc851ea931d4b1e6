"""A node agent's readiness and liveness checks of the instances running on it (the rules:
workers.nodes.probes), and what their results change."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial

from contracts.spec_job import is_job
from controlplane.services.choices import InstanceState
from controlplane.services.events import record
from controlplane.services.models import Instance
from workers.fleet import FleetSettings
from workers.nodes import probes, warmup
from workers.nodes.exits import LOG_TAIL, crashed


def probe_all(due, runtime, fleet, now, clock: probes.ProbeClock, check, background) -> set[str]:
    """Readiness and liveness for the running instances whose checks are due, in parallel.
    A starting instance with a startup probe is ready only once that passes too, and its
    liveness waits until then. When each ran is kept in `clock`: one that changes nothing
    writes nothing (benchmarks/README.md, "Fleet at scale"). The services whose instances
    changed state."""
    checks, recheck = [], {}  # recheck: a starting instance's next check, if it still fails
    for row, found in due:
        spec = row.placed_spec()
        if is_job(spec) or row.rank:  # a job, a gang's member: no calls, nothing to probe
            continue
        found_probes = probes.probe_set(spec)
        starting = row.state == InstanceState.STARTING
        gate = found_probes.startup if starting else None
        started = (row.started_at or now).timestamp()
        run = row.started_at.timestamp() if row.started_at else 0.0  # a restart: probed afresh
        ready_key, alive_key = ("readiness", row.name, run), ("liveness", row.name, run)
        last = clock.get(ready_key, row.probed_at.timestamp() if row.probed_at else None)
        ready_probe = gate or found_probes.readiness
        if probes.due(last, started, now.timestamp(), ready_probe, starting):
            clock[ready_key] = last = now.timestamp()
            checks.append((row, found, "readiness", found_probes.readiness, gate))
        if starting and ready_probe.starting_period:  # the agent comes back for it
            recheck[row.name] = probes.due_at(last, started, ready_probe, starting)
        alive = None if gate else found_probes.liveness
        if alive and probes.due(clock.get(alive_key), started, now.timestamp(), alive):
            clock[alive_key] = now.timestamp()
            checks.append((row, found, "liveness", alive, None))
    if not checks:
        probes.recheck(clock, recheck.values())
        return set()
    with ThreadPoolExecutor(max_workers=min(8, len(checks))) as pool:
        results = list(pool.map(
            lambda c: _passes(c[0], c[1], (c[4], c[3]), runtime, check), checks
        ))  # fmt: skip
    ready_now = {c[0].name for c, passed in zip(checks, results, strict=True)
                 if passed and c[2] == "readiness"}  # fmt: skip
    probes.recheck(clock, [at for name, at in recheck.items() if name not in ready_now])
    touched = set()
    for (row, found, kind, probe, _), passed in zip(checks, results, strict=True):
        if kind == "readiness":
            touched |= after_readiness(row, found, passed, probe, runtime, fleet, now, background)
        elif not passed:
            touched |= _after_liveness_failure(row, probe, runtime, fleet, now)
        elif row.liveness_failures:
            Instance.objects.filter(pk=row.pk).update(liveness_failures=0)
    return touched


def _passes(row, found, steps, runtime, check) -> bool:
    """Whether every probe of `steps` (None: none) passes, in turn: an exec probe in the
    instance (its runtime), a network one at its url (through its front where it has one)."""
    for probe in steps:
        if probe is None:
            continue
        if probe.kind == probes.EXEC:
            passed = runtime.exec_check(row.name, probe.command, probe.timeout)
        else:
            path = probes.request_path(probe, found.fronted)
            asked = probe if path is None else replace(probe, path=path)
            passed = check(found.url or "", found.health_path, asked, row.engine_key())
        if not passed:
            return False
    return True


def after_readiness(row, found, passed, probe, runtime, fleet, now, background) -> set[str]:
    """Write what one readiness check changed; its service's name when the instance changed
    state."""
    current = probes.Readiness(row.state, row.probe_successes, row.probe_failures)
    result = probes.after_readiness(current, passed, probe)
    deadline = _startup_deadline(row, fleet)
    if (
        row.state == InstanceState.STARTING
        and not passed
        and row.started_at
        and ((now - row.started_at).total_seconds() > deadline)
    ):
        runtime.remove(row.name)
        why = f"not ready within {deadline:.0f} s" + _startup_reason(row)
        crashed(row, runtime, fleet, now, why, logs=False)
        return {row.service.name}
    if result == current:
        return set()  # nothing changed: nothing written (the agent's clock has the time)
    changes = dict(state=result.state, probe_successes=result.successes,
                   probe_failures=result.failures, probed_at=now)  # fmt: skip
    if result.event == "InstanceReady":
        changes.update(ready_since=now, message="")
        if row.state == InstanceState.STARTING and warmup.path_of(row):  # replayed, then ready
            Instance.objects.filter(pk=row.pk).update(message="warming up")
            return background(row.name, partial(warmup.warm_then_ready, row, found, runtime,
                                                changes))  # fmt: skip
    # Only over the state this pass read: a row drained meanwhile (by a scheduler pass while
    # the probe ran) must not come back as ready, into routing, to be drained again.
    if not Instance.objects.filter(pk=row.pk, state=row.state).update(**changes):
        return set()
    if result.event == "InstanceReady":
        record(row.service, "InstanceReady", f"readiness check passed at {row.url}", row.name)
    elif result.event == "InstanceUnhealthy":
        record(row.service, "InstanceUnhealthy", f"readiness check failed {result.failures} "
               "times in a row; out of routing until it passes again", row.name)  # fmt: skip
    return {row.service.name} if result.event else set()


def _startup_deadline(row: Instance, fleet: FleetSettings) -> float:
    deadline = probes.probe_set(row.placed_spec()).startup_deadline
    return float(deadline or fleet.health_timeout)


def _startup_reason(row: Instance) -> str:
    startup = probes.probe_set(row.placed_spec()).startup
    return f" (its startup check, {startup.kind}, did not pass)" if startup else ""


def _after_liveness_failure(row, probe, runtime, fleet, now) -> set[str]:
    failures = row.liveness_failures + 1
    if failures < probe.failure_threshold:
        Instance.objects.filter(pk=row.pk).update(liveness_failures=failures)
        return set()
    tail = runtime.logs(row.name, tail=LOG_TAIL)
    runtime.remove(row.name)
    crashed(row, runtime, fleet, now, f"liveness check failed {failures} times", logs=False)
    if tail.strip():
        record(row.service, "InstanceLogs", f"last log lines:\n{tail.strip()}", row.name)
    return {row.service.name}
