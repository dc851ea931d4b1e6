"""The node agent: each node's worker runs one, and it alone acts on that node's instances.

Level-triggered, every couple of seconds and whenever a scheduler wakes it: it compares the
rows assigned to its node (workers.scheduling.scheduler writes them) with what its runtime runs,
starts what is placed here, stops what is drained or no longer assigned here, checks readiness
and liveness (workers.nodes.checks), restarts crashed engines after an exponential back-off
(workers.nodes.exits), and writes what changed to the rows. Starts (staging a model can take
minutes) and stops (a container may take its whole stop timeout) run on threads: probes and
drains never wait behind them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from functools import partial

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from contracts import inflight
from contracts.engines import prepare
from contracts.spec_job import is_job
from controlplane.services.choices import InstanceState
from controlplane.services.events import record
from controlplane.services.models import Instance, Service
from workers.fleet import FleetSettings, wait_for_wake
from workers.locks import client
from workers.models import adapters
from workers.nodes import checks, jobs, probes, writable
from workers.nodes.exits import LOG_TAIL, crashed, spec_of
from workers.nodes.starter import start_instance
from workers.runtimes import ObservedInstance, Runtime
from workers.scheduling import gangs

log = logging.getLogger(__name__)
# Runs `work` for the instance `name` now or on another thread (its name is then busy until
# it is done); what it changed now: the services whose instances changed state.
Background = Callable[[str, Callable[[], set[str]]], set[str]]
DRAIN_GRACE = 30  # seconds, when the spec does not say
SIGTERM_SENT = "SIGTERM sent"  # a draining instance's message once rpc.enable_sigterm signalled


def converge(
    node: str,
    runtime: Runtime,
    fleet: FleetSettings,
    start: Callable[[str], None],
    busy: frozenset[str] = frozenset(),
    now: datetime | None = None,
    probe_clock: probes.ProbeClock | None = None,
    check: Callable[[str, str, probes.Probe, str], bool] = probes.check,
    background: Background = lambda name, work: work(),
) -> set[str]:
    """One pass over this node; the names of services whose instances changed state."""
    clock = probe_clock if probe_clock is not None else {}
    clock.pop(probes.RECHECK, None)  # this pass sets it again, if it still holds
    now = now or timezone.now()
    observed = {o.name: o for o in runtime.list()}
    rows = {r.name: r for r in Instance.objects.filter(node=node).select_related("service")}
    touched = _remove_unassigned(node, runtime, observed, rows, busy, background)
    reports: list[dict] | None = None
    due: list[tuple[Instance, ObservedInstance]] = []
    for row in rows.values():
        found = observed.get(row.name)
        if row.gang and row.state == InstanceState.FAILED and found and found.running:
            touched |= background(row.name, partial(gangs.stop_member, row, runtime))  # whole
        if row.name in busy or row.state in (InstanceState.FAILED, InstanceState.SUCCEEDED):
            continue
        if row.state == InstanceState.DRAINING:
            if reports is None:
                reports = _in_flight_reports()
            touched |= _stop_if_drained(row, found, runtime, fleet, reports, now, background)
        elif found is None or not found.running:
            if _start_due(row, now):
                start(row.name)
                probes.recheck(clock, [probes.first_check_at(row.placed_spec(), time.time())])
            elif row.state != InstanceState.BACKOFF and row.state != InstanceState.CREATING:
                why = "its engine is gone" if found is None else _exit_text(found, runtime)
                if _job_retried(row, found, runtime, fleet, why, background):
                    crashed(row, runtime, fleet, now, why, logs=found is not None)
                touched.add(row.service.name)
        elif row.gang and row.state == InstanceState.BACKOFF:  # another member ended: stop too
            touched |= background(row.name, partial(gangs.stop_member, row, runtime))
        else:
            if row.state in (InstanceState.CREATING, InstanceState.BACKOFF, InstanceState.UNKNOWN):
                _found_running(row, found, now)  # the node came back, or the worker restarted
                touched.add(row.service.name)
            due.append((row, found))
    gone = [k for k in clock if k[1] not in rows and k != probes.RECHECK]  # left this node
    for key in gone:
        del clock[key]
    touched |= checks.probe_all(due, runtime, fleet, now, clock, check, background)
    for row, found in due:  # LoRA adapters the spec lists, loaded while the engine runs
        if row.state == InstanceState.READY and adapters.due(row, now.timestamp()):
            touched |= background(row.name, partial(adapters.sync, row, found, runtime))
    for row, _ in due:  # what writable object-storage mounts wrote, uploaded now and then
        if writable.due(row):
            touched |= background(row.name, partial(writable.sync, row))
    return touched


def _remove_unassigned(node, runtime, observed, rows, busy, background) -> set[str]:
    """Whatever runs here that is not assigned here goes: a service deleted, an instance
    placed elsewhere while this node was away."""
    touched = set()
    for name, found in observed.items():
        if name in rows or name in busy:
            continue

        def remove(name: str = name, found: ObservedInstance = found) -> set[str]:
            log.info("node %s: removing %s, no longer assigned to it", node, name)
            runtime.remove(name)
            service = Service.objects.filter(name=found.service).first()
            if service is None:
                if not runtime.list(service=found.service):
                    runtime.forget(found.service)
                    adapters.forget(found.service)
                return set()
            record(service, "InstanceRemoved", f"no longer assigned to node {node}; removed",
                   name)  # fmt: skip
            return {service.name}

        touched |= background(name, remove)
    return touched


def _job_retried(row: Instance, found, runtime, fleet, why: str, background) -> bool:
    """Whether an ended engine goes into back-off: any service's does; a job's only while
    its command failed and retries are left (else it has succeeded or failed: workers.nodes.jobs).
    What a succeeded job wrote to writable object storage goes up now, its last upload."""
    if not is_job(row.placed_spec()):
        return True
    ended = jobs.ended(row, found, runtime, fleet.job_retries, why)
    if ended is jobs.Outcome.SUCCEEDED and (settings.WHARF_WRITABLE_DIR / row.name).is_dir():
        background(row.name, partial(_released, row))
    return ended is jobs.Outcome.RETRY


def _released(row: Instance) -> set[str]:
    writable.release(row)
    return set()


def _start_due(row: Instance, now: datetime) -> bool:
    if row.state == InstanceState.CREATING:
        return True
    return row.state == InstanceState.BACKOFF and (row.restart_at is None or row.restart_at <= now)


def _exit_text(found: ObservedInstance, runtime: Runtime) -> str:
    if found.ended:  # another of its containers ended: the whole instance restarts
        return found.ended
    if found.exit_code == prepare.PREPARE_FAILED:  # pip's own last lines say why
        return prepare.failure(runtime.logs(found.name, tail=LOG_TAIL))
    return "exited" + ("" if found.exit_code is None else f" with code {found.exit_code}")


def _found_running(row: Instance, found: ObservedInstance, now: datetime) -> None:
    Instance.objects.filter(pk=row.pk, state=row.state).update(
        state=InstanceState.STARTING, url=found.url or "", started_at=row.started_at or now,
        probe_successes=0, probe_failures=0,
    )  # fmt: skip
    row.state, row.url, row.started_at = (
        InstanceState.STARTING,
        found.url or "",
        row.started_at or now,
    )


def _in_flight_reports() -> list[dict]:
    try:
        return inflight.read_reports(client())
    except Exception as exc:  # Redis away: nobody can say, so wait for the grace
        log.warning("cannot read the gateways' in-flight reports: %s", exc)
        return [{"at": 0, "snapshot": 0, "in_flight": {}}]


def _grace(row: Instance) -> float:
    spec = spec_of(row)
    return spec.metadata.termination_grace_period if spec is not None else DRAIN_GRACE


def _stop_if_drained(row, found, runtime, fleet, reports, now, background) -> set[str]:
    """Stop a draining instance once no gateway routes to it or has requests in flight to
    it, or once its grace has passed. With the spec's rpc.enable_sigterm its engine gets
    SIGTERM at once, and once it has ended, it is removed."""
    since = row.draining_since or now
    waited = (now - since).total_seconds()
    if found is not None and found.running and _sigterm_due(row):
        return background(row.name, partial(_sigterm, row, runtime))
    ended = found is None or not found.running
    clear = inflight.drained(reports, row.name, int(since.timestamp() * 1000))
    clear = clear and waited >= fleet.drain_settle
    if not clear and not ended and waited < _grace(row):
        return set()
    why = ("its requests finished" if clear else "it ended" if ended
           else f"its grace of {_grace(row):.0f} s passed")  # fmt: skip

    def stop() -> set[str]:
        if found is not None:
            runtime.remove(row.name)
        writable.release(row)
        row.delete()
        if not Instance.objects.filter(service=row.service_id, node=row.node).exists():
            runtime.forget(row.service.name)  # what its instances shared here (the KV folder)
            adapters.forget(row.service.name)
        record(row.service, "InstanceRemoved", f"stopped after draining: {why}", row.name)
        return {row.service.name}

    return background(row.name, stop)


def _sigterm_due(row: Instance) -> bool:
    spec = spec_of(row)
    rpc = spec.metadata.rpc if spec is not None else None
    return bool(rpc and rpc.enable_sigterm) and not row.message.startswith(SIGTERM_SENT)


def _sigterm(row: Instance, runtime: Runtime) -> set[str]:
    """SIGTERM to a draining instance's engine, once (its message records it)."""
    Instance.objects.filter(pk=row.pk).update(message=f"{SIGTERM_SENT}: {row.message}".strip(": "))
    runtime.terminate(row.name)
    record(row.service, "InstanceSignalled", "SIGTERM sent as it started draining "
           "(metadata.rpc.enable_sigterm)", row.name)  # fmt: skip
    return {row.service.name}


class Agent(threading.Thread):
    """The node's agent loop, in the worker's main process next to its heartbeat."""

    def __init__(self, node: str, runtime: Runtime, fleet: FleetSettings, on_change=None):
        super().__init__(name="wharf-node-agent", daemon=True)
        self.node, self.runtime, self.fleet = node, runtime, fleet
        self.on_change = on_change or (lambda services: None)
        self._stopped = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="wharf-act")
        self._busy: set[str] = set()  # instances a thread of the pool acts on
        self._futures: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._probe_clock: probes.ProbeClock = {}

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                close_old_connections()
                with self._lock:
                    busy = frozenset(self._busy)
                touched = converge(self.node, self.runtime, self.fleet, self._start, busy,
                                   probe_clock=self._probe_clock,
                                   background=self._background)  # fmt: skip
                self.on_change(touched)
            except Exception:  # the loop must outlive a database or runtime hiccup
                log.exception("node %s: agent pass failed", self.node)
            wait = probes.next_pass_in(self._probe_clock, time.time(), self.fleet.agent_interval)
            try:
                wait_for_wake(self.node, wait)
            except Exception:
                self._stopped.wait(wait)

    def _start(self, name: str) -> None:
        def start() -> set[str]:
            service = start_instance(name, self.node, self.runtime, self.fleet,
                                     stopping=self._stopped.is_set)  # fmt: skip
            return {service} if service else set()

        self._background(name, start)

    def _background(self, name: str, work: Callable[[], set[str]]) -> set[str]:
        """Run `work` on a thread of its own, `name` busy meanwhile; once it is done, its
        changes go to on_change. Nothing now."""
        with self._lock:
            if name in self._busy or self._stopped.is_set():
                return set()
            self._busy.add(name)
            self._futures[name] = self._pool.submit(self._run, name, work)
        return set()

    def _run(self, name: str, work: Callable[[], set[str]]) -> None:
        try:
            close_old_connections()
            touched = work()
            if touched:
                self.on_change(touched)
        except Exception:
            log.exception("node %s: acting on %s failed", self.node, name)
        finally:
            with self._lock:
                self._busy.discard(name)
                self._futures.pop(name, None)
            close_old_connections()

    def stop(self, timeout: float = 30) -> None:
        """Stop looping; wait (bounded: staging a model is not interruptible) for starts and
        stops under way, so that no engine is created after the worker has gone."""
        with self._lock:
            self._stopped.set()
            self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:  # what never began will not end
            for name, future in list(self._futures.items()):
                if future.cancelled():
                    self._busy.discard(name)
                    self._futures.pop(name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._busy:
                    return
            time.sleep(0.1)
