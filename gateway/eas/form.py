"""The EAS form of call: /api/predict/<service>/<path> goes to <instance>/<path>.

The service is named in the URL; the path reaches its engine only if the engine's routes allow
it (contracts.engine_routes), matched on the path decoded and normalised (gateway.eas.paths),
and an inference route's body is read as the OpenAI form reads it: the same checks, the same
tokens charged in advance, the same usage metered.
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from contracts.eas_signature import SignedCall
from contracts.engine_routes import (
    CUSTOM,
    GENERATION,
    OPAQUE,
    PARSED_KINDS,
    EngineRoute,
    engine_route,
    inference_paths,
)
from contracts.routing import RoutedService
from contracts.service_groups import RoutedGroup
from gateway import callers, errors
from gateway.eas import signing
from gateway.eas.paths import EnginePath, PathRefusal, engine_path
from gateway.plane import EAS_FORM
from gateway.queues.relay import SINK, relay
from gateway.relay import body as bodies
from gateway.relay.forwarding import (
    CallBody,
    forward,
    runtime_of,
    serviceable,
    with_adapter,
    with_model,
)
from gateway.routing import groups
from gateway.runtime import Runtime


async def predict(request: Request) -> Response:
    """Authorize, find the engine route, read the body, then forward."""
    arrived = time.perf_counter()
    runtime = runtime_of(request)
    if not runtime.watcher.loaded:
        return errors.routing_not_loaded()
    name = request.path_params["service"]
    snapshot = runtime.watcher.current
    callee = _callee(request, runtime, name)
    if isinstance(callee, Response):
        return callee
    service, group = callee
    signed = signing.signed_call(request)  # EAS's signed form: no token in the request
    owners = groups.members(group) if group else frozenset({name})
    token = _token_digest(request, runtime, name, owners, signed)
    if isinstance(token, Response):
        return token
    if group is None:
        caller = callers.authorize(snapshot, service, token, runtime.plane.metrics)
    else:
        caller = groups.authorize(snapshot, group, token, runtime.plane.metrics)
    if isinstance(caller, Response):
        return caller
    if group is not None:
        caller = groups.through(caller, service.name)
    if service.queued:  # an Async service: EAS's queue API (gateway.queues)
        refused = callers.check_scope(caller, service.name, "", runtime.plane.metrics)
        return refused or await _queue_call(request, runtime, service, caller)
    runtime.rates.count(service.name)  # the autoscaler's demand: every authorized request
    found = _route(request, service)
    if isinstance(found, Response):
        return found  # refused before its body is read
    route, target = found
    raw = await bodies.read(request, runtime.settings.max_body_bytes)
    if isinstance(raw, bodies.Invalid):
        return errors.invalid_body(raw)
    if signed is not None:  # the body forwarded is the one signed for
        mismatch = signing.check_body(signed, raw, service.name, runtime.plane.metrics)
        if mismatch is not None:
            return mismatch
    body = _call_body(request, service, route, raw)
    if isinstance(body, Response):
        return body
    refused = callers.check_scope(caller, service.name, body.adapter, runtime.plane.metrics)
    if refused is not None:
        return refused
    generation = body.data is not None and body.kind == GENERATION
    ready = await serviceable(request, runtime, service, generation, arrived, EAS_FORM)
    if isinstance(ready, Response):
        return ready
    if body.adapter:
        ready = with_adapter(ready, body.adapter)
        if isinstance(ready, Response):
            return ready
    return forward(request, runtime, ready, caller, target, body, arrived, EAS_FORM)


async def _queue_call(
    request: Request, runtime: Runtime, service: RoutedService, caller: callers.Caller
) -> Response:
    """An Async service's queue API call. An item put for a path of the instance may name only
    a path a call in EAS form may reach (no engine's administrative route: its feeder calls
    the instance with the engine's key); it is kept normalised, as the engine is called."""
    tail = _eas_tail(request)
    if request.method != "POST" or tail.strip("/") in ("", SINK):
        return await relay(request, runtime, service, caller, tail)
    found = _route(request, service)
    if isinstance(found, Response):
        return found
    return await relay(request, runtime, service, caller, tail, path=found[1])


def _callee(
    request: Request, runtime: Runtime, name: str
) -> tuple[RoutedService, RoutedGroup | None] | Response:
    """The service the URL names, or the member of the group it names that takes this call."""
    snapshot = runtime.watcher.current
    service = snapshot.services.get(name)
    if service is not None:
        return service, None
    group = snapshot.groups.get(name)
    if group is None:
        return errors.unknown_service(name)
    member = runtime.groups.member(snapshot, group, request.headers)
    return member if isinstance(member, Response) else (member, group)


def _token_digest(
    request: Request, runtime: Runtime, name: str, owners: frozenset[str], signed: SignedCall | None
) -> str | None | Response:
    """The digest of the caller's token: the one presented, or the one that signed the call
    (or EAS's 401 for a signed call that no token of `owners`' and no key reaching `name`
    signed)."""
    if signed is None:
        return callers.digest(request.headers.get("authorization"), runtime.settings.secret_key)
    snapshot = runtime.watcher.current
    return signing.verify(runtime.signing, snapshot, name, signed, runtime.plane.metrics, owners)


def _route(request: Request, service: RoutedService) -> tuple[EngineRoute, str] | Response:
    """The engine route the call reaches and the path to call it on, or why it may not."""
    path = engine_path(_eas_tail(request))
    if isinstance(path, PathRefusal):
        return errors.invalid_path(request.url.path, path.reason)
    route = engine_route(service.engine, path.path)
    if route is None:
        return _no_route(service, path)
    if request.method not in route.methods:
        return errors.method_not_allowed(request.method, request.url.path, route.methods)
    # A custom engine's own route keeps the caller's trailing slash (its router may tell
    # them apart); a known route is called as the engine names it.
    return route, path.target(keep_trailing_slash=route.kind == OPAQUE)


def _no_route(service: RoutedService, path: EnginePath) -> Response:
    engine = service.engine or "unknown"
    if service.engine == CUSTOM:
        hint = "It is an administrative route of the engine, which callers never reach."
    else:
        hint = (
            f"Service '{service.name}' runs engine {engine}; the EAS form reaches its "
            f"inference routes: {', '.join(inference_paths(service.engine))}."
        )
    return errors.route_not_found(f"{path.path} on service '{service.name}'", hint)


def _call_body(
    request: Request, service: RoutedService, route: EngineRoute, raw: bytes
) -> CallBody | Response:
    """The body, parsed and checked when its route is one the gateway reads (an OpenAI call
    in EAS form: its body need not name a model), with the adapter its `model` picks."""
    if route.kind not in PARSED_KINDS or request.method != "POST":
        return CallBody(raw, route.kind)
    data = bodies.parse(raw, model_required=False)
    if isinstance(data, bodies.Invalid):
        return errors.invalid_body(data)
    adapter = callers.eas_adapter(service, data.get("model"))
    if adapter is None:
        return errors.unknown_model(data["model"])
    if adapter and data["model"] != adapter:  # "<name>:<adapter>": the engine's name
        raw, data = with_model(data, adapter)
    return CallBody(raw, route.kind, data, adapter)


def _eas_tail(request: Request) -> str:
    """The path after /api/predict/<service>, still percent-encoded as the client sent it:
    gateway.eas.paths decodes it once, itself."""
    raw_path: bytes | None = request.scope.get("raw_path")
    if raw_path is None:
        return request.path_params.get("path", "")
    after_prefix = raw_path.decode("latin-1").removeprefix("/api/predict/")
    _service, _, tail = after_prefix.partition("/")
    return tail
