"""The gateway's ASGI app: authentication and routing in front of engine instances.

Routes:
- POST /api/predict/{service}/{path}  EAS form; the service is named in the URL.
- POST /v1/completions, /v1/chat/completions  OpenAI form; the body's `model` names it.
- GET  /v1/models  the models the presented token may call.
- GET  /healthz  liveness, with the routing snapshot's version.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from contracts.routing import RoutedService, Snapshot
from contracts.tokens import bearer_token, token_digest
from gateway import errors
from gateway.balancer import Balancer
from gateway.config import Settings, load_settings
from gateway.proxy import ProxyResponse, upstream_request_headers
from gateway.snapshot import SnapshotWatcher

log = logging.getLogger(__name__)

# Connecting to an instance on the cluster network is quick or it is not happening; a short
# connect timeout lets a request move on to another instance instead of hanging.
_CONNECT_TIMEOUT_S = 10.0


@dataclass
class Runtime:
    """What the lifespan starts and the handlers share."""

    settings: Settings
    watcher: SnapshotWatcher
    client: httpx.AsyncClient
    balancer: Balancer


def _runtime(request: Request) -> Runtime:
    return request.app.state.runtime


def _digest(request: Request, settings: Settings) -> str | None:
    """The presented token's digest; the plaintext token goes no further than this."""
    token = bearer_token(request.headers.get("authorization"))
    return token_digest(settings.secret_key, token) if token else None


def _check_access(
    request: Request, runtime: Runtime, service: RoutedService | None, name: str
) -> Response | None:
    """An error response when the request may not reach `service`, in 404 → 401 → 503 order."""
    if service is None:
        return errors.unknown_service(name)
    digest = _digest(request, runtime.settings)
    if digest is None:
        return errors.missing_token()
    # A set lookup of a keyed digest: digests are not secret, so timing reveals nothing useful.
    if digest not in service.token_digests:
        return errors.invalid_token(service.name)
    if not service.instances:
        return errors.no_ready_instance(service.name)
    return None


def _forward(request: Request, service: RoutedService, path: str, body: bytes) -> Response:
    runtime = _runtime(request)
    return ProxyResponse(
        client=runtime.client,
        balancer=runtime.balancer,
        service=service,
        method=request.method,
        path=path,
        query=request.scope.get("query_string", b""),
        headers=upstream_request_headers(
            request.headers, request.client.host if request.client else None
        ),
        body=body,
        timeout=runtime.settings.upstream_timeout,
    )


async def predict(request: Request) -> Response:
    """EAS form: /api/predict/<service>/<path> goes to <instance>/<path>."""
    runtime = _runtime(request)
    if not runtime.watcher.loaded:
        return errors.routing_not_loaded()
    name = request.path_params["service"]
    service = runtime.watcher.current.services.get(name)
    denied = _check_access(request, runtime, service, name)
    if denied is not None:
        return denied
    assert service is not None
    body = await request.body()
    return _forward(request, service, _eas_tail(request), body)


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


def _parse_body(body: bytes) -> tuple[str, dict[str, Any]] | Response:
    """The JSON object and its `model`, or the 400 that says what is wrong with the body."""
    try:
        data = json.loads(body)
    except ValueError:
        return errors.error_response(
            400,
            errors.INVALID_REQUEST,
            "invalid_json",
            'The request body must be a JSON object, e.g. {"model": "<model>", "prompt": "Hello"}.',
        )
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, str) or not model:
        return errors.error_response(
            400,
            errors.INVALID_REQUEST,
            "missing_model",
            "The request body needs a 'model' field naming the service or one of its served "
            "model names; GET /v1/models lists the models your token can call.",
        )
    assert isinstance(data, dict)
    return model, data


def _engine_body(service: RoutedService, model: str, data: dict[str, Any], body: bytes) -> bytes:
    """The body for the engine, whose model names are the served ones, not the service's name.

    A client may pick the service by its name; the engine only knows its served model names
    and would answer 404, so the name is swapped for the first served name. Otherwise the
    body goes through byte for byte.
    """
    if not service.served_model_names or model in service.served_model_names:
        return body
    return json.dumps({**data, "model": service.served_model_names[0]}).encode()


async def openai_route(request: Request) -> Response:
    """OpenAI form: the body's `model` picks the service; the path is forwarded unchanged."""
    runtime = _runtime(request)
    body = await request.body()
    parsed = _parse_body(body)
    if isinstance(parsed, Response):
        return parsed
    model, data = parsed
    if not runtime.watcher.loaded:
        return errors.routing_not_loaded()
    service = runtime.watcher.current.find_by_model(model)
    if service is None:
        return errors.unknown_model(model)
    denied = _check_access(request, runtime, service, model)
    if denied is not None:
        return denied
    return _forward(request, service, request.url.path, _engine_body(service, model, data, body))


def _callable_models(snapshot: Snapshot, digest: str) -> list[str]:
    names: list[str] = []
    for name in sorted(snapshot.services):
        service = snapshot.services[name]
        if digest in service.token_digests:
            names.extend(service.served_model_names or (service.name,))
    return list(dict.fromkeys(names))  # de-duplicated, order kept


async def list_models(request: Request) -> Response:
    runtime = _runtime(request)
    digest = _digest(request, runtime.settings)
    if digest is None:
        return errors.missing_token()
    if not runtime.watcher.loaded:
        return errors.routing_not_loaded()
    models = _callable_models(runtime.watcher.current, digest)
    if not models:
        return errors.error_response(
            401,
            errors.AUTHENTICATION,
            "invalid_token",
            "The token is not valid for any service. Check that you copied it correctly and "
            "that it has not been revoked.",
            headers={"WWW-Authenticate": "Bearer"},
        )
    data = [{"id": m, "object": "model", "created": 0, "owned_by": "wharf"} for m in models]
    return JSONResponse({"object": "list", "data": data})


async def healthz(request: Request) -> Response:
    return JSONResponse(
        {"status": "ok", "snapshot_version": _runtime(request).watcher.current.version}
    )


async def http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and wrong methods, in the same error shape as everything else."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return errors.error_response(
            404,
            errors.NOT_FOUND,
            "route_not_found",
            f"No route {request.url.path}. Use /v1/completions, /v1/chat/completions, "
            "/v1/models or /api/predict/<service>/<path>.",
        )
    return errors.error_response(
        exc.status_code,
        errors.INVALID_REQUEST,
        "http_error",
        f"{exc.detail} ({request.method} {request.url.path}).",
        headers=exc.headers,
    )


def create_app(settings: Settings | None = None) -> Starlette:
    """The gateway app; settings default to the environment, read when the server starts."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        current = settings or load_settings()
        watcher = SnapshotWatcher(
            current.redis_url,
            current.snapshot_key,
            current.snapshot_channel,
            current.snapshot_poll,
        )
        client = httpx.AsyncClient(
            timeout=httpx.Timeout(
                current.upstream_timeout,
                connect=min(_CONNECT_TIMEOUT_S, current.upstream_timeout),
            ),
            # No pool cap: engines queue requests themselves, and a cap here would turn
            # long-running streams into spurious timeouts for everyone behind them.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=100),
            # Instance URLs are internal; proxy variables meant for outbound traffic must not apply.
            trust_env=False,
            follow_redirects=False,
        )
        await watcher.start()
        app.state.runtime = Runtime(current, watcher, client, Balancer())
        try:
            yield
        finally:
            await watcher.stop()
            await client.aclose()

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/completions", openai_route, methods=["POST"]),
        Route("/v1/chat/completions", openai_route, methods=["POST"]),
        Route("/api/predict/{service}", predict, methods=["GET", "POST"]),
        Route("/api/predict/{service}/{path:path}", predict, methods=["GET", "POST"]),
    ]
    return Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error}
    )


app = create_app()
