"""Scale from zero, the gateway's side: a request for a service with no instance, whose
autoscaler may stop every instance (`RoutedService.scale_from_zero`, autoscaler min 0), is
held until an instance is ready, then served as any other.

Held requests are reported at once in the gateway's in-flight report (contracts.inflight's
`held`; the report is written as soon as a service's first request is held, not on the next
tick), which is what the autoscaler reads to start an instance. Each routing snapshot the
gateway loads (pub/sub: milliseconds after the control plane publishes it) wakes the
requests whose service it gives an instance that can serve them (for a prefill/decode
service: a decode instance, and a prefill one for a generation call unless decode may serve
alone). Bounds: at most the service's `max_queue_size` (else WHARF_GATEWAY_ACTIVATION_QUEUE)
requests held per service, more are refused at once; each waits at most
WHARF_GATEWAY_ACTIVATION_TIMEOUT seconds, and never past the service's own keepalive; then
503 with a Retry-After. A request whose client leaves is dropped from the hold at once.

A service without scale_from_zero and no instance is answered 503 at once, as ever.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.responses import Response
from starlette.types import Receive

from contracts.routing import RoutedService, Snapshot
from gateway import errors
from gateway.observe import metrics
from gateway.observe.metrics import Metrics
from gateway.routing.pd import by_role

QUEUE_FULL, TIMED_OUT, CLIENT_LEFT, REMOVED = "queue_full", "timed_out", "client_left", "removed"
# nginx's status for "the client closed the connection before the answer" (as gateway.relay.proxy).
_CLIENT_CLOSED = 499


def serves(service: RoutedService, generation: bool) -> bool:
    """Whether the service has the instances a request needs (`generation`: a call that a
    prefill/decode service sends through its prefill leg)."""
    if service.pd is None:
        return bool(service.instances)
    if not by_role(service.instances, "decode"):
        return False
    if not generation or service.pd.on_prefill_failure == "decode_only":
        return True
    return bool(by_role(service.instances, "prefill"))


@dataclass
class _Waiter:
    future: asyncio.Future[RoutedService | None]
    generation: bool


class Activator:
    """The requests held per service, and the snapshot loads that release them."""

    def __init__(
        self,
        counters: Metrics,
        *,
        queue: int,
        timeout: float,
        nudge: Callable[[], None] = lambda: None,
    ) -> None:
        self.queue = queue  # held requests per service, unless its max_queue_size says
        self.timeout = timeout  # seconds a request is held at most
        self._metrics = counters
        self._nudge = nudge  # the in-flight reporter: write the report now
        self._waiting: dict[str, list[_Waiter]] = {}

    def held(self) -> dict[str, int]:
        """Requests held per service (for the in-flight report)."""
        return {name: len(waiters) for name, waiters in self._waiting.items() if waiters}

    def loaded(self, snapshot: Snapshot) -> None:
        """Release the held requests that a snapshot being loaded can serve (the watcher's
        on_load); those of a service it no longer has end as REMOVED."""
        for name, waiters in self._waiting.items():
            service = snapshot.services.get(name)
            for waiter in waiters:
                if waiter.future.done():
                    continue
                if service is None:
                    waiter.future.set_result(None)
                elif serves(service, waiter.generation):
                    waiter.future.set_result(service)

    async def hold(
        self, service: RoutedService, generation: bool, receive: Receive, wait: float
    ) -> RoutedService | str:
        """The service once it can serve the request, or why not: QUEUE_FULL, TIMED_OUT
        (after `wait` seconds), CLIENT_LEFT or REMOVED."""
        name = service.name
        waiters = self._waiting.setdefault(name, [])
        bound = service.max_queue_size or self.queue
        if len(waiters) >= bound:
            self._metrics.reject(name, metrics.REASON_ACTIVATION_QUEUE, 503)
            return QUEUE_FULL
        waiter = _Waiter(asyncio.get_running_loop().create_future(), generation)
        waiters.append(waiter)
        self._changed(name, len(waiters))
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait(
                (waiter.future, gone), timeout=max(wait, 0), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            gone.cancel()
            waiters.remove(waiter)
            if not waiters:
                del self._waiting[name]
            self._changed(name, len(waiters))
        if waiter.future.done():
            found = waiter.future.result()
            if found is None:
                return REMOVED
            self._metrics.activations.labels(name).inc()
            return found
        waiter.future.cancel()
        if gone.done() and not gone.cancelled():
            return CLIENT_LEFT
        self._metrics.activation_timeouts.labels(name).inc()
        return TIMED_OUT

    async def serviceable(
        self,
        current: Snapshot,
        service: RoutedService,
        generation: bool,
        receive: Receive,
        arrived: float,
        eas_form: bool,
    ) -> RoutedService | Response:
        """The service to forward to, once it has instances: at once (its current entry, as
        the body was read since it was looked up), after a hold when it scales from zero,
        else 503."""
        service = current.services.get(service.name, service)
        if service.job:
            return errors.job_takes_no_calls(service.name)
        if not service.scale_from_zero or serves(service, generation):
            # Without instances: 503 now. A prefill/decode service's missing role is the
            # proxy's to answer (no_prefill_instance, or decode alone).
            return service if service.instances else errors.no_ready_instance(service.name)
        wait = self.timeout
        if service.timeout:
            # The service's keepalive bounds the whole request, its hold included.
            wait = min(wait, service.timeout - (time.perf_counter() - arrived))
        outcome = await self.hold(service, generation, receive, wait)
        if isinstance(outcome, RoutedService):
            return outcome
        return self._refusal(service, outcome, wait, eas_form, arrived)

    def _refusal(
        self, service: RoutedService, outcome: str, wait: float, eas_form: bool, arrived: float
    ) -> Response:
        name = service.name
        if outcome == QUEUE_FULL:
            return errors.activation_queue_full(name, service.max_queue_size or self.queue)
        if outcome == REMOVED:
            return errors.unknown_service(name) if eas_form else errors.unknown_model(name)
        response: Response
        if outcome == CLIENT_LEFT:
            response = Response(status_code=_CLIENT_CLOSED)  # nobody reads it
        else:
            response = errors.activation_timeout(name, max(wait, 0))
        self._metrics.answered(name, response.status_code, time.perf_counter() - arrived)
        return response

    def _changed(self, service: str, held: int) -> None:
        self._metrics.held.labels(service).set(held)
        if held == 1:
            self._nudge()  # the first request held: the autoscaler should know now


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
