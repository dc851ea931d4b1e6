"""The gateway's ASGI app: authentication and routing in front of engine instances.

Routes:
- GET/HEAD/POST /api/predict/{service}/{path}  EAS form; the service is named in the URL.
  For an Async service, EAS's queue API (with PUT and DELETE, and a WebSocket to watch):
  gateway.queues.
- POST /v1/completions, /v1/chat/completions, /v1/embeddings, /v1/responses  OpenAI form;
  the body's `model` names the service.
- GET  /v1/models, /v1/models/{model}  the models the presented token may call.
- /v1/files, /v1/batches  OpenAI's Batch API, relayed to the control plane
  (gateway.queues.batches); the feeder runs the batches' requests.
- GET  /healthz  liveness, with the routing snapshot's version.
- GET  /readyz  readiness: 503 until a routing snapshot has been read.
- GET  /metrics  Prometheus metrics (gateway.observe.metrics), for the operator's scraper only
  (gateway.observe.metrics_access).
- /web/{service}/…  the web UI of a service with metadata.enable_webservice, pages and
  WebSockets, for browsers the console signed in (gateway.webapp.pages).

A request is authorized by its service's own token or by an API key in the snapshot
(gateway.callers) before its body is read, then admitted by the limits (gateway.limits.admission)
and forwarded (gateway.relay.proxy).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive, Scope, Send

from contracts.engine_routes import GENERATION, POOLING, RESPONSES
from contracts.routing import ModelMatch, RoutedService
from contracts.webapp import SIGNIN_PATH
from gateway import callers, errors
from gateway.callers import Caller
from gateway.config import Settings, load_settings
from gateway.eas.form import predict
from gateway.observe import metrics
from gateway.observe.metrics_access import metrics_response
from gateway.plane import OPENAI_FORM
from gateway.queues.batches import files_and_batches
from gateway.queues.socket import queue_socket
from gateway.relay import body as bodies
from gateway.relay import request_id
from gateway.relay.forwarding import (
    CallBody,
    forward,
    runtime_of,
    serviceable,
    with_adapter,
    with_model,
)
from gateway.routing import groups
from gateway.runtime import Runtime, running
from gateway.webapp.pages import METHODS as WEB_METHODS
from gateway.webapp.pages import WebClient, signin, web_page
from gateway.webapp.socket import web_socket

log = logging.getLogger(__name__)

# EAS form: engines' routes take GET and POST; an Async service's queue API PUT and DELETE too.
PREDICT_METHODS = ["GET", "POST", "PUT", "DELETE"]

# The OpenAI routes that forward a call, and how each is read (contracts.engine_routes).
_OPENAI_ROUTES = {
    "/v1/completions": GENERATION,
    "/v1/chat/completions": GENERATION,
    "/v1/embeddings": POOLING,
    "/v1/responses": RESPONSES,
}


def _engine_body(
    service: RoutedService, model: str, adapter: str, data: dict[str, Any], body: bytes
) -> tuple[bytes, dict[str, Any]]:
    """The body for the engine, whose model names are the served ones, not the service's name,
    and its adapters' own names.

    A client may pick the service by its name; the engine only knows its served model names
    and would answer 404, so the name is swapped for the first served name; an adapter asked
    as "<model>:<adapter>" for the adapter's name. Otherwise the body goes through byte for
    byte.
    """
    if adapter:
        return with_model(data, adapter)
    if not service.served_model_names or model in service.served_model_names:
        return body, data
    return with_model(data, service.served_model_names[0])


def _caller(request: Request, runtime: Runtime) -> Caller | Response:
    """Who calls an OpenAI route, from the Authorization header alone."""
    if not runtime.watcher.loaded:
        return errors.routing_not_loaded()
    token = callers.digest(request.headers.get("authorization"), runtime.settings.secret_key)
    return callers.identify(runtime.watcher.current, token, runtime.plane.metrics)


async def openai_route(request: Request) -> Response:
    """OpenAI form: the body's `model` picks the service; the path is forwarded unchanged."""
    arrived = time.perf_counter()
    runtime = runtime_of(request)
    caller = _caller(request, runtime)
    if isinstance(caller, Response):
        return caller  # the body of a caller not known is never read
    body = await bodies.read(request, runtime.settings.max_body_bytes)
    if isinstance(body, bodies.Invalid):
        return errors.invalid_body(body)
    data = bodies.parse(body, model_required=True)
    if isinstance(data, bodies.Invalid):
        return errors.invalid_body(data)
    model: str = data["model"]
    found = _callee(request, runtime, caller, model)
    if isinstance(found, Response):
        return found
    caller, match = found
    runtime.rates.count(match.service.name)  # the autoscaler's demand: every authorized request
    path: str = request.scope["path"]
    kind = _OPENAI_ROUTES[path]
    generation = kind == GENERATION
    service = await serviceable(request, runtime, match.service, generation, arrived, OPENAI_FORM)
    if isinstance(service, Response):
        return service
    if match.adapter:
        service = with_adapter(service, match.adapter)
        if isinstance(service, Response):
            return service
    body, data = _engine_body(service, model, match.adapter, data, body)
    call_body = CallBody(body, kind, data, match.adapter)
    return forward(request, runtime, service, caller, path, call_body, arrived, OPENAI_FORM)


def _callee(
    request: Request, runtime: Runtime, caller: Caller, model: str
) -> tuple[Caller, ModelMatch] | Response:
    """The service (and adapter) `model` names; for a service group's name, the member that
    takes this call and the caller let through to it. OpenAI's 404 for a model or group the
    caller may not call, as for one that does not exist."""
    snapshot = runtime.watcher.current
    group = snapshot.groups.get(model)
    if group is None:
        match = callers.model_service(snapshot, caller, model, runtime.plane.metrics)
        return match if isinstance(match, Response) else (caller, match)
    if not groups.may_call(caller, group, time.time()):
        runtime.plane.metrics.reject(group.name, metrics.REASON_KEY_SCOPE, 404)
        return errors.unknown_model(group.name)
    member = runtime.groups.member(runtime.watcher.current, group, request.headers)
    if isinstance(member, Response):
        return member
    return groups.through(caller, member.name), ModelMatch(member)


async def list_models(request: Request) -> Response:
    runtime = runtime_of(request)
    caller = _caller(request, runtime)
    if isinstance(caller, Response):
        return caller
    snapshot, now = runtime.watcher.current, time.time()
    models = callers.callable_models(snapshot, caller, now)
    models += [(name, "") for name, group in sorted(snapshot.groups.items())
               if groups.may_call(caller, group, now)]  # fmt: skip
    return JSONResponse({"object": "list", "data": [_model_object(*m) for m in models]})


async def get_model(request: Request) -> Response:
    """OpenAI's model object for one model the caller may call; 404 model_not_found else."""
    runtime = runtime_of(request)
    caller = _caller(request, runtime)
    if isinstance(caller, Response):
        return caller
    model = request.path_params["model"]
    group = runtime.watcher.current.groups.get(model)
    if group is not None and groups.may_call(caller, group, time.time()):
        return JSONResponse(_model_object(model))
    found = callers.model_service(runtime.watcher.current, caller, model, runtime.plane.metrics)
    if isinstance(found, Response):
        return found
    parent = found.service.model_names[0] if found.adapter else ""
    return JSONResponse(_model_object(model, parent))


def _model_object(model: str, parent: str = "") -> dict[str, Any]:
    """OpenAI's model object; `parent`: an adapter's base model (null for a base model)."""
    return {"id": model, "object": "model", "created": 0, "owned_by": "wharf",
            "parent": parent or None}  # fmt: skip


async def healthz(request: Request) -> Response:
    return JSONResponse(
        {"status": "ok", "snapshot_version": runtime_of(request).watcher.current.version}
    )


async def readyz(request: Request) -> Response:
    """Ready once a routing snapshot has been read: before, every call would be refused."""
    watcher = runtime_of(request).watcher
    if not watcher.ready:
        return errors.not_ready()
    return JSONResponse({"status": "ready", "snapshot_version": watcher.current.version})


async def prometheus(request: Request) -> Response:
    """The metrics, for the operator's scraper alone (gateway.observe.metrics_access)."""
    runtime = runtime_of(request)
    authorization = request.headers.get("authorization")
    exposition = runtime.plane.metrics.exposition
    return metrics_response(runtime.settings.metrics_token, authorization, exposition)


def _no_route(request: Request) -> Response:
    return errors.route_not_found(request.url.path)


async def http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and wrong methods, in the same error shape as everything else."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return _no_route(request)
    return errors.error_response(
        exc.status_code,
        errors.INVALID_REQUEST,
        "http_error",
        f"{exc.detail} ({request.method} {request.url.path}).",
        headers=exc.headers,
    )


class _FastPath:
    """Generation calls go straight to their handler; everything else through Starlette.

    Starlette's middleware layers (error and exception handlers, each wrapping `send`) and
    its route matching cost about a tenth of a proxied request's CPU; the hot routes need
    none of it (their handler answers every error itself; an unexpected exception becomes a
    500 here). Every request gets its x-request-id here first (gateway.relay.request_id).
    """

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self.state = app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tagged = request_id.tag(scope, send)
        try:
            if scope["method"] == "POST" and scope["path"] in _OPENAI_ROUTES:
                scope["app"] = self.app  # what Request.app reads, as Starlette would set it
                response = await openai_route(Request(scope, receive))
                await response(scope, receive, tagged)
                return
            await self.app(scope, receive, tagged)
        except Exception:
            if tagged.started:
                raise  # uvicorn logs it (with the request's id) and drops the connection
            log.exception("unexpected error answering %s %s", scope["method"], scope["path"])
            await errors.internal_error()(scope, receive, tagged)


def create_app(settings: Settings | None = None) -> _FastPath:
    """The gateway app; settings default to the environment, read when the server starts."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with running(settings or load_settings()) as runtime:
            app.state.runtime = runtime
            app.state.web = WebClient(runtime.settings.upstream_timeout)
            try:
                yield
            finally:
                await app.state.web.close()

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
        *(Route(path, openai_route, methods=["POST"]) for path in _OPENAI_ROUTES),
        Route("/v1/files", files_and_batches, methods=["GET", "POST"]),
        Route("/v1/files/{file_id}", files_and_batches, methods=["GET", "DELETE"]),
        Route("/v1/files/{file_id}/content", files_and_batches, methods=["GET"]),
        Route("/v1/batches", files_and_batches, methods=["GET", "POST"]),
        Route("/v1/batches/{batch_id}", files_and_batches, methods=["GET"]),
        Route("/v1/batches/{batch_id}/cancel", files_and_batches, methods=["POST"]),
        # GET routes take HEAD too.
        Route("/api/predict/{service}", predict, methods=PREDICT_METHODS),
        Route("/api/predict/{service}/{path:path}", predict, methods=PREDICT_METHODS),
        WebSocketRoute("/api/predict/{service}", queue_socket),
        WebSocketRoute("/api/predict/{service}/{path:path}", queue_socket),
        Route("/web/{service}/" + SIGNIN_PATH, signin, methods=["GET"]),
        Route("/web/{service}", web_page, methods=WEB_METHODS),
        Route("/web/{service}/{path:path}", web_page, methods=WEB_METHODS),
        WebSocketRoute("/web/{service}/{path:path}", web_socket),
    ]
    return _FastPath(
        Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})
    )


app = create_app()
