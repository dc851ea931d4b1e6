"""From an authorized, parsed request to the response that forwards it (gateway.relay.proxy): what
both forms of call (gateway.app's OpenAI routes, gateway.eas.form) share."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response

from contracts.engine_routes import GENERATION
from contracts.routing import RoutedService
from gateway import errors
from gateway.callers import Caller
from gateway.limits.admission import Demand
from gateway.limits.rules import instance_bounds
from gateway.plane import EAS_FORM, Call
from gateway.relay import body as bodies
from gateway.relay import request_id
from gateway.relay.headers import upstream_request_headers
from gateway.relay.proxy import ProxyResponse
from gateway.routing.pd import PrefillLeg, by_role
from gateway.routing.request_keys import routing_key
from gateway.runtime import Runtime


@dataclass(frozen=True)
class CallBody:
    """A request's body and what the gateway made of it."""

    raw: bytes
    kind: str  # how its route is read (contracts.engine_routes: GENERATION, POOLING...)
    data: dict[str, Any] | None = None  # parsed, for the routes whose body the gateway reads
    adapter: str = ""  # the LoRA adapter it calls ("" for the base model)


def runtime_of(request: HTTPConnection) -> Runtime:
    return request.app.state.runtime


def demand(service: RoutedService, caller: Caller, tokens: int, adapter: str) -> Demand:
    workers, queue_size = instance_bounds(service.worker_threads, service.max_queue_size)
    shared = Demand(
        service.name,
        rate_limit=service.rate_limit,
        tokens=tokens,
        queue_size=queue_size,
        service_concurrency=service.concurrency_limit or 0,
        workers=workers,
    )
    key = caller.key
    if key is None:
        return shared
    return replace(
        shared,
        key_id=key.id,
        rpm=key.rpm or 0,
        tpm=key.tpm or 0,
        max_concurrency=key.max_concurrency or 0,
        adapter=adapter,
    )


def forward(
    request: Request,
    runtime: Runtime,
    service: RoutedService,
    caller: Caller,
    path: str,
    body: CallBody,
    arrived: float,
    form: str,
) -> Response:
    """The response that forwards the request to `path` on one of the service's instances."""
    # Prompt tokens estimated as a quarter of the body's bytes (about 4 bytes a token for
    # English, and JSON's punctuation errs on the high side): free to compute, and the
    # engine's real count replaces it once the answer is in.
    prompt = len(body.raw) // 4
    raw, data, strip_usage = body.raw, body.data, False
    if data is not None and body.kind == GENERATION:
        raw, strip_usage = bodies.ask_for_usage(data, raw)
    tokens = prompt + bodies.completion_budget(data, body.kind)
    drop = frozenset({"accept-encoding"}) if data is not None else frozenset()
    service, track = runtime.tracks.track(service)  # a canary release's split
    prefill, policy, used = None, service.routing, {service.routing}
    if service.pd is not None:
        # A prefill/decode service: decode instances answer, after a prefill leg for
        # generation calls (gateway.routing.pd), which the service's routing policy ranks.
        if data is not None and body.kind == GENERATION:
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
        demand=demand(service, caller, tokens, body.adapter),
        method=request.method,
        path=path,
        query=request.scope.get("query_string", b""),
        # Generation answers are read for their usage, so they must come uncompressed.
        headers=upstream_request_headers(request.headers, client, drop, request_id.current()),
        body=raw,
        timeout=runtime.settings.upstream_timeout,
        prompt_estimate=prompt,
        strip_usage=strip_usage,
        arrived=arrived,
        policy=policy,
        routing_key=routing_key(used, data, request.headers, service.session_header, body.adapter),
        prefill=prefill,
        form=form,
        keepalive=service.timeout,
        adapter=body.adapter,
        track=track,
    )
    if not service.mirror_targets:
        return ProxyResponse(runtime.plane, call)

    def mirror(admitted: Call) -> None:
        runtime.mirrors.admitted(runtime.plane, runtime.watcher.current, admitted)

    return ProxyResponse(runtime.plane, call, mirror)


async def serviceable(
    request: Request,
    runtime: Runtime,
    service: RoutedService,
    generation: bool,
    arrived: float,
    form: str,
) -> RoutedService | Response:
    """The service with instances to serve the request (held while a service scaled to zero
    starts one: gateway.routing.activation), or the answer why not; `generation`: a call that needs
    a prefill instance too."""
    return await runtime.activator.serviceable(
        runtime.watcher.current, service, generation, request.receive, arrived,
        eas_form=form == EAS_FORM,
    )  # fmt: skip


def with_model(data: dict[str, Any], model: str) -> tuple[bytes, dict[str, Any]]:
    data = {**data, "model": model}
    return json.dumps(data).encode(), data


def with_adapter(service: RoutedService, adapter: str) -> RoutedService | Response:
    """The service with only the instances that have `adapter` loaded (workers.models.adapters)."""
    serving = tuple(i for i in service.instances if i.serves(adapter))
    if not serving:
        return errors.adapter_not_loaded(service.name, adapter)
    return replace(service, instances=serving)
