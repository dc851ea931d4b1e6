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
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from contracts.routing import RoutedService, Snapshot
from gateway import body as bodies
from gateway import callers, errors, request_id
from gateway.balancer import Balancer
from gateway.callers import Caller
from gateway.config import Settings, load_settings
from gateway.engine_auth import EngineKeys
from gateway.headers import upstream_request_headers
from gateway.health import RedisHealth
from gateway.inflight import InflightReporter
from gateway.limits import Demand, Limiter
from gateway.metrics import Metrics
from gateway.pd import PrefillLeg, by_role
from gateway.pipelined import PipelinedRedis
from gateway.proxy import EAS_FORM, OPENAI_FORM, Call, Plane, ProxyResponse
from gateway.snapshot import SnapshotWatcher
from gateway.upstream import Upstream
from gateway.usage import UsageRecorder

log = logging.getLogger(__name__)

# Limits and usage sit on the request path: a Redis that does not answer within this is
# treated as down (limits count in-process) rather than holding requests up.
_REDIS_TIMEOUT_S = 1.0
_REDIS_CONNECTIONS = 128
# The OpenAI routes that forward a call, also reachable through the EAS form.
_OPENAI_PATHS = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings")


@dataclass
class Runtime:
    """What the lifespan starts and the handlers share."""

    settings: Settings
    watcher: SnapshotWatcher
    plane: Plane


def _runtime(request: Request) -> Runtime:
    return request.app.state.runtime


def _demand(service: RoutedService, caller: Caller, tokens: int) -> Demand:
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
) -> Response:
    """The response that forwards the request; `data`: the parsed body of an OpenAI call."""
    # Prompt tokens estimated as a quarter of the body's bytes (about 4 bytes a token for
    # English, and JSON's punctuation errs on the high side): free to compute, and the
    # engine's real count replaces it once the answer is in.
    prompt = len(body) // 4
    strip_usage = False
    if data is not None:
        body, strip_usage = bodies.ask_for_usage(data, body)
    tokens = prompt + bodies.max_tokens(data)
    drop = frozenset({"accept-encoding"}) if data is not None else frozenset()
    prefill, policy = None, "least_outstanding"
    if service.pd is not None:
        # A prefill/decode service: decode instances answer, after a prefill leg for
        # generation calls (gateway.pd).
        if data is not None:
            prefill = PrefillLeg(service.pd, by_role(service.instances, "prefill"), data)
        service = replace(service, instances=by_role(service.instances, "decode"))
        policy = service.pd.decode_policy if service.pd else policy
        if not service.instances:
            return errors.no_ready_instance(service.name)
    client = request.client.host if request.client else None
    call = Call(
        service=service,
        key_id=caller.key_id,
        demand=_demand(service, caller, tokens),
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
        prefill=prefill,
        form=form,
        keepalive=service.timeout,
    )
    return ProxyResponse(runtime.plane, call)


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
    body = await bodies.read(request, runtime.settings.max_body_bytes)
    if isinstance(body, bodies.Invalid):
        return errors.invalid_body(body)
    tail = _eas_tail(request)
    data: dict[str, Any] | None = None
    if request.method == "POST" and ("/" + tail.lstrip("/")).split("?")[0] in _OPENAI_PATHS:
        # An OpenAI call in EAS form: read like one, for usage and token limits (its body
        # need not name a model).
        parsed = bodies.parse(body, model_required=False)
        if isinstance(parsed, bodies.Invalid):
            return errors.invalid_body(parsed)
        data = parsed
    return _forward(request, runtime, service, caller, tail, body, data, arrived, EAS_FORM)


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
    service: RoutedService, model: str, data: dict[str, Any], body: bytes
) -> tuple[bytes, dict[str, Any]]:
    """The body for the engine, whose model names are the served ones, not the service's name.

    A client may pick the service by its name; the engine only knows its served model names
    and would answer 404, so the name is swapped for the first served name. Otherwise the
    body goes through byte for byte.
    """
    if not service.served_model_names or model in service.served_model_names:
        return body, data
    data = {**data, "model": service.served_model_names[0]}
    return json.dumps(data).encode(), data


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
    service = callers.model_service(runtime.watcher.current, caller, model, runtime.plane.metrics)
    if isinstance(service, Response):
        return service
    if not service.instances:
        return errors.no_ready_instance(service.name)
    body, data = _engine_body(service, model, data, body)
    path = request.scope["path"]
    return _forward(request, runtime, service, caller, path, body, data, arrived, OPENAI_FORM)


async def list_models(request: Request) -> Response:
    runtime = _runtime(request)
    caller = _caller(request, runtime)
    if isinstance(caller, Response):
        return caller
    models = callers.callable_models(runtime.watcher.current, caller, time.time())
    return JSONResponse({"object": "list", "data": [_model_object(m) for m in models]})


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
    return JSONResponse(_model_object(model))


def _model_object(model: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": 0, "owned_by": "wharf"}


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


async def http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and wrong methods, in the same error shape as everything else."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return errors.error_response(
            404,
            errors.INVALID_REQUEST,
            "route_not_found",
            f"No route {request.url.path}. Use /v1/completions, /v1/chat/completions, "
            "/v1/embeddings, /v1/models or /api/predict/<service>/<path>.",
        )
    return errors.error_response(
        exc.status_code,
        errors.INVALID_REQUEST,
        "http_error",
        f"{exc.detail} ({request.method} {request.url.path}).",
        headers=exc.headers,
    )


@asynccontextmanager
async def _running(settings: Settings) -> AsyncIterator[Runtime]:
    """Every background part of a gateway process, started in order and stopped in reverse."""
    client = aioredis.Redis(
        connection_pool=aioredis.BlockingConnectionPool.from_url(
            settings.redis_url,
            # redis-py's default pool fails requests beyond 100 connections in use (as a
            # ConnectionError, which would read as an outage); this one makes them wait.
            max_connections=_REDIS_CONNECTIONS,
            timeout=_REDIS_TIMEOUT_S,
            socket_connect_timeout=_REDIS_TIMEOUT_S,
            socket_timeout=_REDIS_TIMEOUT_S,
            # One quick retry rides over a pooled connection that a restarted Redis dropped;
            # more would hold requests up during a real outage.
            retry=Retry(NoBackoff(), 1),
        )
    )
    counters = Metrics()
    watcher: SnapshotWatcher | None = None
    health = RedisHealth(client, lambda: watcher.fallback_description() if watcher else "")
    engine_keys = EngineKeys(settings.secret_key)
    balancer = Balancer(settings.cooldown)
    inflight = InflightReporter(client, balancer, health)

    def loaded(snapshot: Snapshot) -> None:
        engine_keys.load(snapshot)
        inflight.seen(snapshot)

    watcher = SnapshotWatcher(
        settings.redis_url,
        settings.snapshot_key,
        settings.snapshot_channel,
        settings.snapshot_poll,
        health,
        on_load=loaded,
    )
    pipe = PipelinedRedis(settings.redis_url, _REDIS_TIMEOUT_S)
    limiter = Limiter(
        client,
        pipe,
        health,
        prefix=settings.limits_prefix,
        second_s=settings.second_s,
        minute_s=settings.minute_s,
        lease_ttl=settings.lease_ttl,
    )
    usage = UsageRecorder(
        client, health, prefix=settings.usage_prefix, interval=settings.usage_flush_interval
    )
    upstream = Upstream(keepalive_s=settings.upstream_keepalive)
    plane = Plane(upstream, balancer, limiter, usage, counters, engine_keys)
    counters.watch(lambda: health.up, watcher.age, lambda: watcher.current.version)
    health.start()
    await watcher.start()
    limiter.start()
    usage.start()
    inflight.start()
    try:
        yield Runtime(settings, watcher, plane)
    finally:
        await inflight.stop()
        await watcher.stop()
        await limiter.stop()
        await usage.stop()
        await health.stop()
        await plane.upstream.close()
        await pipe.close()
        await client.aclose()


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
        async with _running(settings or load_settings()) as runtime:
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
