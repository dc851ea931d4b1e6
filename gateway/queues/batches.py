"""OpenAI's Files and Batches API (/v1/files, /v1/batches), for OpenAI's SDK unchanged: the
caller's API key is authenticated here (gateway.callers) and the call relayed as it came to the
control plane (controlplane.batches.internal) with the key's id, which picks its workspace.
Uploads stream through: the control plane bounds their size (WHARF_BATCH_FILE_MAX_BYTES).
A batch's requests then run as queue items this gateway's feeder hands to the instances."""

from __future__ import annotations

import httpx
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from contracts.usage import SERVICE_TOKEN_ID
from gateway import callers, errors
from gateway.queues.plane_client import PlaneError
from gateway.relay.forwarding import runtime_of

KEPT = ("content-type", "content-disposition")
TIMEOUT_S = 300.0  # an upload or a download of a large file


async def files_and_batches(request: Request) -> Response:
    runtime = runtime_of(request)
    if not runtime.watcher.loaded:
        return errors.routing_not_loaded()
    token = callers.digest(request.headers.get("authorization"), runtime.settings.secret_key)
    caller = callers.identify(runtime.watcher.current, token, runtime.plane.metrics)
    if isinstance(caller, Response):
        return caller
    if caller.key is None or caller.key_id == SERVICE_TOKEN_ID:
        return errors.error_response(
            403, errors.INVALID_REQUEST, "api_key_required",
            "Files and batches belong to a workspace: call them with an API key.",
        )  # fmt: skip
    headers = {"content-type": request.headers.get("content-type", "")}
    if "content-length" in request.headers:  # a WSGI server reads no chunked upload
        headers["content-length"] = request.headers["content-length"]
    try:
        answer = await runtime.queues.plane.openai(
            request.method, request.url.path, request.url.query, request.stream(), headers,
            caller.key_id, TIMEOUT_S,
        )  # fmt: skip
    except PlaneError as exc:
        return errors.error_response(
            503, "server_error", "batches_unavailable",
            f"Files and batches cannot be reached now ({exc}); retry shortly.",
        )  # fmt: skip
    if request.method == "POST" and request.url.path == "/v1/batches":
        runtime.queues.feeder.nudge()
    kept = {name: answer.headers[name] for name in KEPT if name in answer.headers}
    return StreamingResponse(_body(answer), status_code=answer.status_code, headers=kept)


async def _body(answer: httpx.Response):  # noqa: ANN202 (an async iterator of bytes)
    try:
        async for chunk in answer.aiter_bytes():
            yield chunk
    finally:
        await answer.aclose()
