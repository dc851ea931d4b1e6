"""EAS's queue API at /api/predict/<service>[/sink] for an Async service: the caller is
authenticated and its key's scope checked (gateway.eas.form), then the call goes to the store as
it came (method, query, body), with who put it and the path its instance is to be called on.

A Put through this gateway wakes its feeder at once; other gateways' feeders find the item on
their next poll.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from contracts.queue_calls import wait_seconds
from contracts.routing import RoutedService
from gateway import errors
from gateway.callers import Caller
from gateway.queues.plane_client import PlaneError, relay_headers
from gateway.relay import body as bodies

if TYPE_CHECKING:
    from gateway.runtime import Runtime

SINK = "sink"
# The store's answer headers a caller reads (eas-prediction reads the request id on a Put).
KEPT = ("content-type", "x-eas-queueservice-request-id", "x-eas-queueservice-index")
SERVER_ERROR = "server_error"


def queue_and_path(tail: str) -> tuple[str, str]:
    """Which queue a call reaches and, for the input queue, the path its item is served on:
    `/sink` is the sink; any other path is the input queue (`/sdapi/v1/txt2img?task_id=…`:
    an item for that path of the instance)."""
    if tail.strip("/") == SINK:
        return SINK, ""
    return "input", tail


def store_unreachable(service: str, why: str) -> Response:
    return errors.error_response(
        503,
        SERVER_ERROR,
        "queue_unavailable",
        f"The queues of service '{service}' cannot be reached now ({why}); retry shortly.",
    )


async def relay(
    request: Request,
    runtime: Runtime,
    service: RoutedService,
    caller: Caller,
    tail: str,
    path: str | None = None,
) -> Response:
    """The call to the store; `path`: the instance's path for a put (checked by the caller,
    gateway.eas.form), else the one `tail` names."""
    queue, named = queue_and_path(tail)
    path = named if path is None else path
    body = b""
    if request.method in ("POST", "PUT"):
        raw = await bodies.read(request, runtime.settings.max_body_bytes)
        if isinstance(raw, bodies.Invalid):
            return errors.invalid_body(raw)
        body = raw
    try:
        wait = wait_seconds(request.query_params.get("_timeout_"))
    except ValueError:
        wait = 0.0  # the store names the parameter
    headers = relay_headers(
        request.headers.get("content-type", ""),
        request.headers.get("accept", ""),
        caller.key_id,
        path,
    )
    try:
        answer = await runtime.queues.plane.relay(
            request.method, service.name, queue, request.url.query, body, headers, wait
        )
    except PlaneError as exc:
        return store_unreachable(service.name, str(exc))
    if request.method == "POST" and answer.status_code == 200 and queue != SINK:
        runtime.queues.feeder.nudge()
    kept = {name: answer.headers[name] for name in KEPT if name in answer.headers}
    return Response(answer.content, status_code=answer.status_code, headers=kept)
