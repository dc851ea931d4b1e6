"""The gateway's ASGI app: authentication and routing in front of engine instances.

Routes:
- GET/HEAD/POST /api/predict/{service}/{path}  EAS form; the service is named in the URL.
- POST /v1/completions, /v1/chat/completions, /v1/embeddings  OpenAI form; the body's
  `model` names the service.
- GET  /v1/models, /v1/models/{model}  the models the presented token may call.
- GET  /healthz  liveness, with the routing snapshot's version.
- GET  /readyz  readiness: 503 until a routing snapshot has been read.
- GET  /metrics  Prometheus metrics (gateway.metrics).

A request is authorized by its service's own token or by an API key in the snapshot
(gateway.callers) before its body is read, then admitted by the limits (gateway.limits)
and forwarded (gateway.proxy).
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from contracts.routing import RoutedService
from gateway import body as bodies
from gateway import callers, errors, request_id
from gateway.callers import Caller
from gateway.config import Settings, load_settings
from gateway.headers import upstream_request_headers
from gateway.limits import Demand
from gateway.pd import PrefillLeg, by_role
from gateway.proxy import EAS_FORM, OPENAI_FORM, Call, ProxyResponse
from gateway.request_keys import routing_key
from gateway.runtime import Runtime, running

log = logging.getLogger(__name__)

# The OpenAI routes that forward a call, also reachable through the EAS form.
_OPENAI_PATHS = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings")
# Engine routes only the node calls (vLLM's runtime LoRA endpoints: workers.adapters), never
# forwarded from a caller.
_NODE_ONLY = ("/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/adapters")


def node_only(tail: str) -> bool:
    """Whether an EAS tail reaches a route only the node may call, as the engine's router
    will read it: percent-decoded, dot segments and repeated slashes resolved."""
    path = posixpath.normpath("/" + unquote(tail.split("?", 1)[0]).lstrip("/"))
    path = "/" + path.lstrip("/")
    return any(path == p or path.startswith(p + "/") for p in _NODE_ONLY)


def _runtime(request: Request) -> Runtime:
    return request.app.state.runtime


def _demand(service: RoutedService, caller: Caller, tokens: int, adapter: str) -> Demand:
    key = caller.key
    if key is None:
        return Demand(
            service.name,
            rate_limit=service.rate_limit,
            tokens=tokens,
            queue_size=service.max_queue_size or 0,
        )
    return Demand(
        service.name,
        rate_limit=service.rate_limit,
        key_id=key.id,
        rpm=key.rpm or 0,
        tpm=key.tpm or 0,
        max_concurrency=key.max_concurrency or 0,
        tokens=tokens,
        queue_size=service.max_queue_size or 0,
        adapter=adapter,
    )


def _forward(
    request: Request,
    runtime: Runtime,
    service: RoutedService,
    caller: Caller,
    path: str,
    body: bytes,
    data: dict[str, Any] | None,
    arrived: float,
    form: str,
    adapter: str = "",
) -> Response:
    """The response that forwards the request; `data`: the parsed body of an OpenAI call;
    `adapter`: the LoRA adapter it calls."""
    # Prompt tokens estimated as a quarter of the body's bytes (about 4 bytes a token for
    # English, and JSON's punctuation errs on the high side): free to compute, and the
    # engine's real count replaces it once the answer is in.
    prompt = len(body) // 4
    strip_usage = False
    if data is not None:
        body, strip_usage = bodies.ask_for_usage(data, body)
    tokens = prompt + bodies.max_tokens(data)
    drop = frozenset({"accept-encoding"}) if data is not None else frozenset()
    prefill, policy, used = None, service.routing, {service.routing}
    if service.pd is not None:
        # A prefill/decode service: decode instances answer, after a prefill leg for
        # generation calls (gateway.pd), which the service's routing policy ranks.
        if data is not None:
            prefill = PrefillLeg(service.pd, by_role(service.instances, "prefill"), data)
        policy = service.pd.decode_policy
        used = {service.pd.prefill_policy, policy}
        service = replace(service, instances=by_role(service.instances, "decode"))
        if not service.instances:
            return errors.no_ready_instance(service.name)
    client = request.client.host if request.client else None
    call = Call(
        service=service,
        key_id=caller.key_id,
        demand=_demand(service, caller, tokens, adapter),
        method=request.method,
        path=path,
        query=request.scope.get("query_string", b""),
        # Generation answers are read for their usage, so they must come uncompressed.
        headers=upstream_request_headers(request.headers, client, drop, request_id.current()),
        body=body,
        timeout=runtime.settings.upstream_timeout,
        prompt_estimate=prompt,
        strip_usage=strip_usage,
        arrived=arrived,
        policy=policy,
        routing_key=routing_key(used, data, request.headers, service.session_header, adapter),
        prefill=prefill,
        form=form,
        keepalive=service.timeout,
        adapter=adapter,
    )
    return ProxyResponse(runtime.plane, call)


async def _serviceable(
    request: Request,
    runtime: Runtime,
    service: RoutedService,
    data: dict[str, Any] | None,
    arrived: float,
    form: str,
) -> RoutedService | Response:
    """The service with instances to serve the request (held while a service scaled to zero
    starts one: gateway.activation), or the answer why not."""
    return await runtime.activator.serviceable(
        runtime.watcher.current, service, data is not None, request.receive, arrived,
        eas_form=form == EAS_FORM,
    )  # fmt: skip


async def predict(request: Request) -> Response:
    """EAS form: /api/predict/<service>/<path> goes to <instance>/<path>."""
    arrived = time.perf_counter()
    runtime = _runtime(request)
    if not runtime.watcher.loaded:
        return errors.routing_not_loaded()
    name = request.path_params["service"]
    snapshot = runtime.watcher.current
    service = snapshot.services.get(name)
    if service is None:
        return errors.unknown_service(name)
    token = callers.digest(request.headers.get("authorization"), runtime.settings.secret_key)
    caller = callers.authorize(snapshot, service, token, runtime.plane.metrics)
    if isinstance(caller, Response):
        return caller
    runtime.rates.count(name)  # the autoscaler's demand: every authorized request
    body = await bodies.read(request, runtime.settings.max_body_bytes)
    if isinstance(body, bodies.Invalid):
        return errors.invalid_body(body)
    tail = _eas_tail(request)
    if node_only(tail):
        return _no_route(request)
    data: dict[str, Any] | None = None
    adapter = ""
    if request.method == "POST" and ("/" + tail.lstrip("/")).split("?")[0] in _OPENAI_PATHS:
        # An OpenAI call in EAS form: read like one, for usage and token limits (its body
        # need not name a model).
        parsed = bodies.parse(body, model_required=False)
        if isinstance(parsed, bodies.Invalid):
            return errors.invalid_body(parsed)
        data = parsed
        picked = callers.eas_adapter(service, data.get("model"))
        if picked is None:
            return errors.unknown_model(data["model"])
        adapter = picked
        if adapter and data["model"] != adapter:  # "<name>:<adapter>": the engine's name
            body, data = _with_model(data, adapter)
    refused = callers.check_scope(caller, service.name, adapter, runtime.plane.metrics)
    if refused is not None:
        return refused
    ready = await _serviceable(request, runtime, service, data, arrived, EAS_FORM)
    if isinstance(ready, Response):
        return ready
    if adapter:
        ready = _with_adapter(ready, adapter)
        if isinstance(ready, Response):
            return ready
    return _forward(request, runtime, ready, caller, tail, body, data, arrived, EAS_FORM, adapter)


def _eas_tail(request: Request) -> str:
    """The path after /api/predict/<service>, still percent-encoded as the client sent it.

    Forwarding the raw form matters: decoding first would turn an encoded "/" in a segment
    into a path separator the engine never intended.
    """
    raw_path: bytes | None = request.scope.get("raw_path")
    if raw_path is None:
        return request.path_params.get("path", "")
    after_prefix = raw_path.decode("latin-1").removeprefix("/api/predict/")
    _service, _, tail = after_prefix.partition("/")
    return tail


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
        return _with_model(data, adapter)
    if not service.served_model_names or model in service.served_model_names:
        return body, data
    return _with_model(data, service.served_model_names[0])


def _with_model(data: dict[str, Any], model: str) -> tuple[bytes, dict[str, Any]]:
    data = {**data, "model": model}
    return json.dumps(data).encode(), data


def _with_adapter(service: RoutedService, adapter: str) -> RoutedService | Response:
    """The service with only the instances that have `adapter` loaded (workers.adapters)."""
    serving = tuple(i for i in service.instances if i.serves(adapter))
    if not serving:
        return errors.adapter_not_loaded(service.name, adapter)
    return replace(service, instances=serving)


def _caller(request: Request, runtime: Runtime) -> Caller | Response:
    """Who calls an OpenAI route, from the Authorization header alone."""
    if not runtime.watcher.loaded:
        return errors.routing_not_loaded()
    token = callers.digest(request.headers.get("authorization"), runtime.settings.secret_key)
    return callers.identify(runtime.watcher.current, token, runtime.plane.metrics)


async def openai_route(request: Request) -> Response:
    """OpenAI form: the body's `model` picks the service; the path is forwarded unchanged."""
    arrived = time.perf_counter()
    runtime = _runtime(request)
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
    match = callers.model_service(runtime.watcher.current, caller, model, runtime.plane.metrics)
    if isinstance(match, Response):
        return match
    runtime.rates.count(match.service.name)  # the autoscaler's demand: every authorized request
    service = await _serviceable(request, runtime, match.service, data, arrived, OPENAI_FORM)
    if isinstance(service, Response):
        return service
    if match.adapter:
        service = _with_adapter(service, match.adapter)
        if isinstance(service, Response):
            return service
    body, data = _engine_body(service, model, match.adapter, data, body)
    path = request.scope["path"]
    return _forward(
        request, runtime, service, caller, path, body, data, arrived, OPENAI_FORM, match.adapter
    )


async def list_models(request: Request) -> Response:
    runtime = _runtime(request)
    caller = _caller(request, runtime)
    if isinstance(caller, Response):
        return caller
    models = callers.callable_models(runtime.watcher.current, caller, time.time())
    return JSONResponse({"object": "list", "data": [_model_object(*m) for m in models]})


async def get_model(request: Request) -> Response:
    """OpenAI's model object for one model the caller may call; 404 model_not_found else."""
    runtime = _runtime(request)
    caller = _caller(request, runtime)
    if isinstance(caller, Response):
        return caller
    model = request.path_params["model"]
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
        {"status": "ok", "snapshot_version": _runtime(request).watcher.current.version}
    )


async def readyz(request: Request) -> Response:
    """Ready once a routing snapshot has been read: before, every call would be refused."""
    watcher = _runtime(request).watcher
    if not watcher.ready:
        return errors.not_ready()
    return JSONResponse({"status": "ready", "snapshot_version": watcher.current.version})


async def prometheus(request: Request) -> Response:
    body, content_type = _runtime(request).plane.metrics.exposition()
    return Response(body, media_type=content_type)


def _no_route(request: Request) -> Response:
    return errors.error_response(
        404,
        errors.INVALID_REQUEST,
        "route_not_found",
        f"No route {request.url.path}. Use /v1/completions, /v1/chat/completions, "
        "/v1/embeddings, /v1/models or /api/predict/<service>/<path>.",
    )


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
    500 here). Every request gets its x-request-id here first (gateway.request_id).
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
            if scope["method"] == "POST" and scope["path"] in _OPENAI_PATHS:
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
            yield

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
        *(Route(path, openai_route, methods=["POST"]) for path in _OPENAI_PATHS),
        # GET routes take HEAD too.
        Route("/api/predict/{service}", predict, methods=["GET", "POST"]),
        Route("/api/predict/{service}/{path:path}", predict, methods=["GET", "POST"]),
    ]
    return _FastPath(
        Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})
    )


app = create_app()
