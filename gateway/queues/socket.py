"""EAS's queue subscription: a WebSocket on /api/predict/<service>[/sink]?_watch_=true that
pushes each item as a DataFrameProto (contracts.queue_frames) as soon as it is there, at most
`_window_` not yet committed at once; with `_auto_commit_=true` an item is committed as it is
sent. eas-prediction's `QueueClient.watch` speaks it.

The gateway holds the socket and long-polls the store for the subscriber's next items (and for
which of those it sent were committed since, by the caller's PUT on any gateway).
Refused before the handshake (uvicorn answers 403) for a caller the service's tokens and keys do
not admit, or a query the queue API does not take.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time

from starlette.websockets import WebSocket, WebSocketDisconnect

from contracts.queue_calls import QueueCallError, Watch, read_call
from contracts.queue_frames import Frame, frame
from gateway import callers
from gateway.queues.plane_client import PlaneError
from gateway.queues.relay import queue_and_path
from gateway.relay.forwarding import runtime_of

log = logging.getLogger(__name__)

POLL_WAIT_S = 5.0
RETRY_S = 1.0  # after the store could not be reached
_NOT_AUTHORIZED = 4401
_NOT_FOUND = 4404


async def queue_socket(websocket: WebSocket) -> None:
    runtime = runtime_of(websocket)
    name = websocket.path_params["service"]
    queue, _ = queue_and_path(websocket.path_params.get("path", ""))
    snapshot = runtime.watcher.current
    service = snapshot.services.get(name)
    if service is None or not service.queued:
        await websocket.close(_NOT_FOUND)
        return
    digest = callers.digest(websocket.headers.get("authorization"), runtime.settings.secret_key)
    caller = callers.authorize(snapshot, service, digest, runtime.plane.metrics)
    if not isinstance(caller, callers.Caller) or not caller.may_call(name, time.time()):
        await websocket.close(_NOT_AUTHORIZED)
        return
    try:
        call = read_call("GET", dict(websocket.query_params), websocket=True)
    except QueueCallError:
        await websocket.close(1008)  # policy violation: a query the queue API does not take
        return
    assert isinstance(call, Watch)
    await websocket.accept()
    pushing = asyncio.create_task(_push(websocket, runtime, name, queue, call))
    try:
        while True:  # the subscriber sends nothing; this notices when it leaves
            if (await websocket.receive())["type"] == "websocket.disconnect":
                break
    except WebSocketDisconnect:
        pass
    finally:
        pushing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pushing


async def _push(websocket: WebSocket, runtime, name: str, queue: str, call: Watch) -> None:  # noqa: ANN001
    plane = runtime.queues.plane
    after = max(call.index - 1, 0)
    pending: list[int] = []
    while True:
        params = {
            "after": str(after),
            "pending": ",".join(map(str, pending)),
            "window": str(call.window),
            "index_only": str(call.index_only).lower(),
            **call.tags,
        }
        try:
            found = await plane.watch(name, queue, params, POLL_WAIT_S)
        except PlaneError as exc:
            log.warning("queue watch of %s/%s: %s", name, queue, exc)
            await asyncio.sleep(RETRY_S)
            continue
        gone = set(found.get("gone", []))
        pending = [index for index in pending if index not in gone]
        sent: list[int] = []
        for item in found.get("items", []):
            data = base64.b64decode(item.get("data", ""))
            tags = {str(k): str(v) for k, v in (item.get("tags") or {}).items()}
            await websocket.send_bytes(
                frame(Frame(int(item["index"]), data, tags, str(item.get("message", ""))))
            )
            after = max(after, int(item["index"]))
            sent.append(int(item["index"]))
        if call.auto_commit and sent:
            await _commit(plane, name, queue, sent)
        elif sent:
            pending += sent


async def _commit(plane, name: str, queue: str, indexes: list[int]) -> None:  # noqa: ANN001
    query = "_indexes_=" + ",".join(map(str, indexes))
    with contextlib.suppress(PlaneError):
        await plane.relay("PUT", name, queue, query, b"", {}, 0.0)
