"""Forwarding one request to an engine instance and streaming its answer back.

The proxying happens inside the ASGI response (ProxyResponse) rather than in the route
handler, because that is the only place that can watch the client's connection: if the
client goes away at any point (while the engine is still computing a non-streamed answer,
or mid-stream) the upstream request is cancelled and its connection closed, which is how
an OpenAI-compatible engine learns to abort the generation and free its batch slot. It is
also where the limits are taken and, whatever happens, given back.

Upstream calls go through gateway.relay.upstream, one set of connection pools per process: a lean
HTTP/1.1 client, since its cost is paid on every request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from contracts.routing import RoutedInstance
from contracts.usage import usage_model
from gateway import errors
from gateway.config import AnswerCaps
from gateway.limits.admission import Admission, Demand
from gateway.limits.rules import Refusal
from gateway.observe import metrics
from gateway.observe.request_log import call_entry, keep_head
from gateway.observe.tracing import Span, SpanKind, operation
from gateway.plane import EAS_FORM, OPENAI_FORM, Call, Plane
from gateway.relay.headers import client_response_headers
from gateway.relay.taps import EventTooLargeError, JsonTap, SseTap
from gateway.relay.upstream import (
    Answer,
    ConnectFailedError,
    UpstreamBrokenError,
    UpstreamError,
    UpstreamTimeoutError,
)
from gateway.routing.prefill import run_prefill

log = logging.getLogger(__name__)

# nginx's status for "the client closed the connection before the answer".
CLIENT_CLOSED = 499
__all__ = ["EAS_FORM", "OPENAI_FORM", "Call", "Plane", "ProxyResponse"]
_CLIENT_LEFT, _EXPIRED = "client_left", "expired"
# An engine's 404 for a route it lacks is read whole, up to this, to see whose it is.
_MISSING_ROUTE_READ = 64 * 1024
_UNTRACED: AbstractContextManager = nullcontext()  # a step's span when tracing is off


@dataclass
class _Outcome:
    status: int = 0
    answered: bool = False  # the engine's status line reached the client
    complete: bool = False  # ... and its whole body
    counts: tuple[int, int] | None = None  # (prompt, completion) tokens the engine reported
    events: int = 0  # data events relayed, when streaming
    ended: bool = False  # nothing left to abort: the answer is complete or given up
    stopped: str = ""  # why the gateway cancelled the request: _CLIENT_LEFT or _EXPIRED
    first_byte: float = 0.0  # seconds from arrival to the answer's first byte
    last_byte: float = 0.0  # ... and to its last read
    reads: int = 0  # network reads of a streamed answer (about one per token)
    broken: bool = False  # the stream was cut short
    kept: bytearray | None = None  # the answer's head, for a service's request log


class ProxyResponse(Response):
    """An ASGI response that takes the limits, forwards the request and relays the answer."""

    def __init__(
        self, plane: Plane, call: Call, on_admitted: Callable[[Call], None] | None = None
    ) -> None:
        self.plane = plane
        self.call = call
        self.status_code = 0  # known once the engine answers
        self.background = None
        # told once the limits took the call (gateway.routing.mirror)
        self.on_admitted = on_admitted
        # the call's span, when tracing is on (gateway.observe.tracing)
        self.span: Span | None = None
        self.asked = call.body  # the request as the caller sent it, for the request log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        plane, call = self.plane, self.call
        if plane.tracing is not None:
            model = usage_model(call.service.name, call.adapter)
            self.span = plane.tracing.call_span(f"{call.method} {call.path}", call.headers, {
                "gen_ai.request.model": model, "gen_ai.operation.name": operation(call.path),
                "wharf.service": call.service.name,
            })  # fmt: skip
        with self._step("routing"):
            ranked = plane.balancer.ranked(
                call.service.name, call.service.instances, policy=call.policy,
                key=call.routing_key,
            )  # fmt: skip
        demand = call.demand
        if demand.queue_size:
            demand = replace(demand, instances=tuple(i.url for i in ranked))
        with self._step("admission"):
            admission = await plane.limiter.admit(demand)
        if admission.refusal is not None:
            status = await self._refuse(admission.refusal, scope, receive, send)
            if self.span is not None and plane.tracing is not None:
                self.span.set_attribute("wharf.refused", admission.refusal.reason)
                plane.tracing.finish(self.span, status, None)
            return
        if self.on_admitted is not None:
            self.on_admitted(call)
        outcome = _Outcome()
        if call.service.request_log is not None:
            outcome.kept = bytearray()
        task = asyncio.current_task()
        assert task is not None
        watcher = asyncio.ensure_future(_disconnected(receive))

        def stop(why: str) -> None:
            # uvicorn also reports a disconnect once the answer is complete: only one that
            # comes while the engine is still answering aborts the request.
            if not outcome.ended and not outcome.stopped:
                outcome.stopped = why
                task.cancel()

        def client_left(_: asyncio.Future[None]) -> None:
            if not watcher.cancelled():
                stop(_CLIENT_LEFT)

        # A plain task and callback, not an anyio task group: a quarter of the cost, and this
        # runs for every request.
        watcher.add_done_callback(client_left)
        deadline = None
        if call.keepalive:
            # metadata.rpc.keepalive bounds the whole request, from its arrival.
            left = call.keepalive - (time.perf_counter() - call.arrived)
            deadline = asyncio.get_running_loop().call_later(max(left, 0), stop, _EXPIRED)
        try:
            # A worker slot first (metadata.rpc.worker_threads), before any prefill leg.
            if admission.slot is not None and not await self._slot(
                admission, demand, outcome, scope, receive, send
            ):
                return
            if call.prefill is not None:
                with self._step("prefill", SpanKind.CLIENT) as leg:
                    decode_body = await run_prefill(plane, self._traced(leg), call.prefill)
                if isinstance(decode_body, Response):
                    await self._error(decode_body, outcome, scope, receive, send)
                    return
                self.call = replace(call, body=decode_body)
            name = "engine" if call.prefill is None else "decode"
            with self._step(name, SpanKind.CLIENT) as engine:
                self.call = self._traced(engine)
                await self._relay(ranked, demand, admission, outcome, scope, receive, send)
        except asyncio.CancelledError:
            if not outcome.stopped:
                raise
            # Our own cancellation, for the departed client or the keepalive: it ends here.
            task.uncancel()
            if outcome.stopped == _EXPIRED and not outcome.answered:
                await self._error(self._expired(), outcome, scope, receive, send)
            # Expired mid-answer: returning unfinished makes the server drop the connection.
        finally:
            outcome.ended = True
            if deadline is not None:
                deadline.cancel()
            watcher.remove_done_callback(client_left)
            watcher.cancel()
            self._finish(admission, outcome)
            if self.span is not None and plane.tracing is not None:
                plane.tracing.finish(self.span, outcome.status or CLIENT_CLOSED, outcome.counts)

    def _step(self, name: str, kind: SpanKind = SpanKind.INTERNAL) -> AbstractContextManager:
        """A span for one step of the call, under the call's; nothing when tracing is off."""
        tracing, span = self.plane.tracing, self.span
        if tracing is None or span is None:
            return _UNTRACED
        return tracing.step(name, span, kind)

    def _traced(self, leg: Span | None) -> Call:
        """The call with `leg`'s trace context in its headers, which the engine joins."""
        tracing = self.plane.tracing
        if leg is None or tracing is None:
            return self.call
        return replace(self.call, headers=tracing.headers_for(leg, self.call.headers))

    async def _refuse(self, refusal: Refusal, scope: Scope, receive: Receive, send: Send) -> int:
        """A limit refused the request: 429, or EAS's 450 for a full instance queue."""
        call = self.call
        status = refusal.status
        if call.form == EAS_FORM and refusal.reason == metrics.REASON_INSTANCE_QUEUE:
            status = errors.EAS_QUEUE_FULL
        self.plane.metrics.reject(call.service.name, refusal.reason, status)
        response = errors.rate_limited(
            refusal.error_type, refusal.message, refusal.headers,
            retryable=refusal.retryable, status=status,
        )  # fmt: skip
        await response(scope, receive, send)
        return status

    def _expired(self) -> Response:
        """The answer to a request past its service's keepalive: EAS's 408, OpenAI's 504."""
        call = self.call
        assert call.keepalive is not None
        if call.form == EAS_FORM:
            return errors.request_timeout(call.service.name, call.keepalive)
        return errors.upstream_timeout(call.service.name, call.keepalive)

    async def _relay(
        self,
        ranked: list[RoutedInstance],
        demand: Demand,
        admission: Admission,
        outcome: _Outcome,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        plane, service = self.plane, self.call.service
        tried: set[str] = set()
        instance = _first(ranked, admission.instance)
        last_error: BaseException | None = None
        while instance is not None:
            if admission.slot is not None and not await self._slot(
                admission, demand, outcome, scope, receive, send
            ):
                return
            tried.add(instance.url)
            plane.balancer.acquire(instance.url)
            try:
                answer = await self._open(instance)
            except ConnectFailedError as exc:
                # The engine never got the request, so another instance can safely take it.
                plane.balancer.release(instance.url)
                self._failed(instance, metrics.UPSTREAM_CONNECT, exc)
                last_error = exc
                instance = await self._next(instance, demand, admission, tried)
                continue
            except UpstreamTimeoutError as exc:
                plane.balancer.release(instance.url)
                self._failed(instance, metrics.UPSTREAM_TIMEOUT, exc)
                response = errors.upstream_timeout(service.name, self.call.timeout)
                await self._error(response, outcome, scope, receive, send)
                return
            except UpstreamBrokenError as exc:
                # The request may have reached the engine; retrying could run it twice.
                plane.balancer.release(instance.url)
                self._failed(instance, metrics.UPSTREAM_BROKEN, exc)
                response = errors.upstream_failed(service.name)
                await self._error(response, outcome, scope, receive, send)
                return
            except BaseException:
                plane.balancer.release(instance.url)
                raise
            try:
                if answer.status in (404, 405) and self.call.form == OPENAI_FORM:
                    body = await answer.peek(_MISSING_ROUTE_READ)
                    if b'"error"' not in body:
                        # The engine's framework's own 404 (vLLM: {"detail": "Not Found"}): it
                        # lacks the route, e.g. /v1/embeddings for a text generation model.
                        response = errors.unsupported_route(service.name, self.call.path)
                        await self._error(response, outcome, scope, receive, send)
                        return
                await self._stream(answer, instance, admission, outcome, send)
            finally:
                plane.balancer.release(instance.url)
                if outcome.complete:
                    answer.release()
                else:
                    # Closing (not pooling) the connection is what tells the engine to abort.
                    answer.close()
            return
        if isinstance(last_error, ConnectFailedError) and last_error.timed_out:
            response = errors.upstream_timeout(service.name, self.call.timeout)
        else:
            response = errors.upstream_unreachable(service.name)
        await self._error(response, outcome, scope, receive, send)

    async def _slot(
        self,
        admission: Admission,
        demand: Demand,
        outcome: _Outcome,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> bool:
        """Wait for a worker slot at the admission's instance (metadata.rpc.worker_threads):
        True once taken; False when the wait outlasted the upstream timeout (answered 504).
        The keepalive's deadline cancels the wait as it cancels the rest of the request."""
        call = self.call
        try:
            async with asyncio.timeout(None if call.keepalive else call.timeout):
                await self.plane.limiter.wait_for_slot(admission, demand.workers)
        except TimeoutError:
            response = errors.upstream_timeout(call.service.name, call.timeout)
            await self._error(response, outcome, scope, receive, send)
            return False
        return True

    async def _open(self, instance: RoutedInstance) -> Answer:
        call, plane = self.call, self.plane
        headers = [*call.headers, plane.engine_keys.authorization(instance)]
        return await plane.upstream.request(
            instance.url, call.method, call.target, headers, call.body, call.timeout
        )

    def _failed(self, instance: RoutedInstance, kind: str, why: BaseException | str) -> None:
        self.plane.instance_failed(self.call.service.name, instance, kind, why)

    async def _next(
        self, failed: RoutedInstance, demand: Demand, admission: Admission, tried: set[str]
    ) -> RoutedInstance | None:
        """The next instance to try after a failed connect, its queue slot taken if bounded."""
        plane = self.plane
        call = self.call
        ranked = plane.balancer.ranked(
            call.service.name, call.service.instances, tried, call.policy, call.routing_key
        )
        if not ranked:
            return None
        if not await plane.limiter.reroute(admission, demand, [i.url for i in ranked]):
            return None
        return _first(ranked, admission.instance)

    async def _stream(
        self,
        answer: Answer,
        instance: RoutedInstance,
        admission: Admission,
        outcome: _Outcome,
        send: Send,
    ) -> None:
        call = self.call
        if self.plane.tracing is not None:
            self.plane.tracing.mark_instance(instance.name, instance.url)
        sse, json_tap = _taps(answer, call.strip_usage, self.plane.caps)
        headers = client_response_headers(
            answer.headers, instance, sse is not None and call.strip_usage, answer.status
        )
        self.status_code = outcome.status = answer.status
        if answer.status >= 500:
            # Passed on as is (the engine may have done the work, so no retry), but the
            # instance sits out a cool-down like one that cannot be reached.
            self._failed(instance, metrics.UPSTREAM_5XX, f"answered {answer.status}")
        await send(
            {
                "type": "http.response.start",
                "status": answer.status,
                "headers": headers + admission.headers,
            }
        )
        outcome.answered = True
        first_byte = True
        try:
            # Relayed per network read: no decoding and no buffering, so each SSE event
            # reaches the client as it is made. The taps only look (or cut one event).
            while chunk := await answer.read_chunk():
                if first_byte:
                    first_byte = False
                    elapsed = time.perf_counter() - call.arrived
                    outcome.first_byte = elapsed
                    self.plane.metrics.first_byte_after(call.service.name, elapsed, call.adapter)
                if sse is not None:
                    outcome.reads += 1
                    outcome.last_byte = time.perf_counter() - call.arrived
                    chunk = sse.feed(chunk)
                elif json_tap is not None:
                    json_tap.feed(chunk)
                if answer.at_eof:
                    break  # the last read: it goes out with the end of the body, in one write
                if chunk:
                    if outcome.kept is not None:
                        keep_head(outcome.kept, chunk, call.service.request_log)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except UpstreamError as exc:
            # Too late for an error status. Returning without finishing the body makes the
            # server drop the connection, so the client sees a truncated answer, not a
            # complete-looking one.
            self._failed(instance, metrics.UPSTREAM_BROKEN, exc)
            outcome.broken = True
            return
        except EventTooLargeError as exc:
            # An event that never ends (the gateway would hold it all to read it): the stream
            # ends with an error event naming the cap and is cut like a broken one's, and
            # closing the engine's connection stops its generation.
            self._failed(instance, metrics.UPSTREAM_TOO_LARGE, exc)
            cut = errors.event_too_large(call.service.name, exc.limit)
            await send({"type": "http.response.body", "body": cut, "more_body": True})
            return
        finally:
            if sse is not None:
                outcome.counts, outcome.events = sse.counts, sse.events
        if sse is not None:
            chunk += sse.finish()
            outcome.counts = sse.counts
        outcome.ended = True
        if outcome.kept is not None:
            keep_head(outcome.kept, chunk, call.service.request_log)
        await send({"type": "http.response.body", "body": chunk, "more_body": False})
        outcome.complete = True
        if json_tap is not None:
            outcome.counts = json_tap.usage()

    async def _error(
        self, response: Response, outcome: _Outcome, scope: Scope, receive: Receive, send: Send
    ) -> None:
        outcome.status = response.status_code
        outcome.ended = True  # nothing left to abort: neither a departure nor the keepalive cuts it
        await response(scope, receive, send)

    def _finish(self, admission: Admission, outcome: _Outcome) -> None:
        """Give the limits back, count usage and metrics: runs however the request ended."""
        plane, call = self.plane, self.call
        name = call.service.name
        counts = self._token_counts(outcome)
        plane.limiter.release(admission, None if counts is None else sum(counts))
        latency = time.perf_counter() - call.arrived
        if outcome.answered:
            prompt, completion = counts or (0, 0)
            plane.usage.add(
                usage_model(name, call.adapter), call.key_id, prompt, completion,
                latency_ms=round(latency * 1000), ttft_ms=round(outcome.first_byte * 1000),
            )  # fmt: skip
            if prompt or completion:
                plane.metrics.counted(name, prompt, completion, call.adapter)
        status = outcome.status or CLIENT_CLOSED
        plane.metrics.answered(name, status, latency, call.adapter)
        if plane.figures is not None and (outcome.answered or status >= 500):
            first = outcome.first_byte if outcome.answered and outcome.first_byte else None
            gaps = outcome.reads - 1
            itl = (outcome.last_byte - outcome.first_byte) / gaps if gaps > 0 else None
            plane.figures.add(name, call.track, status, outcome.broken, first, itl)
        if outcome.kept is not None and plane.request_log is not None:
            entry = call_entry(call, self.asked, status, latency, counts, bytes(outcome.kept))
            plane.request_log.add(name, entry)

    def _token_counts(self, outcome: _Outcome) -> tuple[int, int] | None:
        """Tokens the request used: as reported, else estimated; None: unknown (keep the hold)."""
        if outcome.counts is not None:
            return outcome.counts
        if not outcome.answered:
            # Refused by the gateway or the client left first: nothing was generated for it,
            # unless the engine was already working on it when the client left.
            return (0, 0) if outcome.status else None
        if not 200 <= outcome.status < 300:
            return (0, 0)
        # No usage reported (an engine without it, or a stream cut short): the body's size
        # for the prompt and one token per streamed event.
        return self.call.prompt_estimate, outcome.events


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _first(ranked: list[RoutedInstance], url: str | None) -> RoutedInstance | None:
    if url is not None:
        for instance in ranked:
            if instance.url == url:
                return instance
    return ranked[0] if ranked else None


def _taps(
    answer: Answer, strip_usage: bool, caps: AnswerCaps
) -> tuple[SseTap | None, JsonTap | None]:
    """Which tap reads the answer's usage: only successful, unencoded JSON or event streams."""
    if not 200 <= answer.status < 300 or answer.header(b"content-encoding"):
        return None, None
    content_type = (answer.header(b"content-type") or b"").lower()
    if content_type.startswith(b"text/event-stream"):
        return SseTap(strip_usage, caps.sse_event), None
    if content_type.startswith(b"application/json"):
        return None, JsonTap(caps.json_copy)
    return None, None
