"""Mirroring (EAS's ServiceMirror): a share of a service's calls is also sent to other
services, whose answers are read to the end and discarded.

A copy never touches the caller's call: it is sent beside it, in a task of its own, after
the caller's call was admitted; its failures are the mirror's figures, never the caller's
answer; and a gateway keeps at most MAX_COPIES copies in flight, skipping (and counting)
the rest rather than holding anything up. The share is exact per gateway: every
100 / ratio-th call is copied. A copy goes to the target's least-loaded ready instance, with
the target's engine key and its model name; its figures are recorded on the target's
"mirror" track (contracts.call_figures) and its tokens count to the target's usage under
the key id MIRROR_KEY_ID. Prefill/decode-separated targets are not mirrored to.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from contracts.call_figures import MIRROR
from contracts.routing import RoutedService, Snapshot
from contracts.usage import MIRROR_KEY_ID, usage_model
from gateway.plane import Call, Plane
from gateway.relay.taps import EventTooLargeError, JsonTap, SseTap
from gateway.relay.upstream import Answer, UpstreamError

log = logging.getLogger(__name__)

MAX_COPIES = 64  # copies in flight per gateway process
SKIP_NO_TARGET, SKIP_NOT_READY, SKIP_BUSY, SKIP_PD = "no_target", "not_ready", "busy", "pd"


class Mirrors:
    def __init__(self, limit: int = MAX_COPIES) -> None:
        self._owed: dict[str, int] = {}  # per source service: ratio points not yet copied
        self._tasks: set[asyncio.Task[None]] = set()
        self._limit = limit

    def due(self, service: RoutedService) -> bool:
        """Whether this call of `service` is copied: exactly ratio % of its calls."""
        if not service.mirror_targets or service.mirror_ratio <= 0:
            return False
        owed = self._owed.get(service.name, 0) + service.mirror_ratio
        due = owed >= 100
        self._owed[service.name] = owed - 100 if due else owed
        return due

    def admitted(self, plane: Plane, snapshot: Snapshot, call: Call) -> None:
        """A call of a mirrored service was admitted: copy it when its turn is due."""
        if self.due(call.service):
            self.copy(plane, snapshot, call)

    def copy(self, plane: Plane, snapshot: Snapshot, call: Call) -> None:
        """Send a copy of `call` to each of its service's mirror targets, in the background."""
        for name in call.service.mirror_targets:
            target = snapshot.services.get(name)
            skipped = _why_not(target, len(self._tasks) >= self._limit)
            if skipped or target is None:
                plane.metrics.mirror_skipped(call.service.name, name, skipped or SKIP_NO_TARGET)
                continue
            task = asyncio.create_task(_send(plane, target, call, _body(target, call)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        """Copies still in flight are abandoned: they answer no one."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _why_not(target: RoutedService | None, busy: bool) -> str:
    if target is None:
        return SKIP_NO_TARGET
    if target.pd is not None:
        return SKIP_PD
    if not target.instances:
        return SKIP_NOT_READY
    return SKIP_BUSY if busy else ""


def _body(target: RoutedService, call: Call) -> bytes:
    """The call's body, naming the target's model where the call names another."""
    if not target.served_model_names or b'"model"' not in call.body:
        return call.body
    try:
        data = json.loads(call.body)
    except ValueError:
        return call.body
    if not isinstance(data, dict) or data.get("model") in (None, *target.served_model_names):
        return call.body
    return json.dumps({**data, "model": target.served_model_names[0]}).encode()


async def _send(plane: Plane, target: RoutedService, call: Call, body: bytes) -> None:
    instance = plane.balancer.ranked(target.name, target.instances)[0]
    headers = [*call.headers, plane.engine_keys.authorization(instance)]
    started = time.perf_counter()
    status, broken, timings = 502, False, _Timings()
    counts: tuple[int, int] | None = None
    plane.balancer.acquire(instance.url)
    try:
        answer = await plane.upstream.request(
            instance.url, call.method, call.target, headers, body, call.timeout
        )
        status = answer.status
        try:
            counts = await _drain(answer, timings, plane)
            answer.release()
        except (UpstreamError, EventTooLargeError):
            broken = True
            answer.close()
    except UpstreamError as exc:
        log.info("mirrored copy to %s failed: %s", target.name, exc)
    except Exception:  # never the caller's problem; logged for the operator
        log.exception("mirrored copy to %s failed", target.name)
    finally:
        plane.balancer.release(instance.url)
    first = timings.first - started if timings.first else None
    gaps = timings.reads - 1 if timings.streamed else 0
    itl = (timings.last - timings.first) / gaps if gaps > 0 else None
    if plane.figures is not None:
        plane.figures.add(target.name, MIRROR, status, broken, first, itl)
    if status < 500 and not broken:
        prompt, completion = counts or (len(body) // 4, 0)
        latency_ms = round((time.perf_counter() - started) * 1000)
        plane.usage.add(usage_model(target.name), MIRROR_KEY_ID, prompt, completion,
                        latency_ms=latency_ms, ttft_ms=round((first or 0) * 1000))  # fmt: skip
    plane.metrics.mirrored(call.service.name, target.name, status)


class _Timings:
    first = 0.0
    last = 0.0
    reads = 0
    streamed = False


async def _drain(answer: Answer, timings: _Timings, plane: Plane) -> tuple[int, int] | None:
    """Read the answer to its end, timing its reads; the usage it reports, if any."""
    content_type = (answer.header(b"content-type") or b"").lower()
    tap: Any = None
    if 200 <= answer.status < 300 and not answer.header(b"content-encoding"):
        if content_type.startswith(b"text/event-stream"):
            tap, timings.streamed = SseTap(False, plane.caps.sse_event), True
        elif content_type.startswith(b"application/json"):
            tap = JsonTap(plane.caps.json_copy)
    while chunk := await answer.read_chunk():
        now = time.perf_counter()
        timings.first = timings.first or now
        timings.last = now
        timings.reads += 1
        if tap is not None:
            tap.feed(chunk)
        if answer.at_eof:
            break
    if isinstance(tap, SseTap):
        tap.finish()
        return tap.counts
    return tap.usage() if isinstance(tap, JsonTap) else None
