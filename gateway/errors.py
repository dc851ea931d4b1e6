"""OpenAI's error bodies, so OpenAI SDKs surface the gateway's messages as they are.

`type` is one of OpenAI's: `invalid_request_error` for what the caller can fix (400, 401,
403, 404, 413), `server_error` for the gateway's and engines' failures (5xx), and for 429s
the limit's kind (`requests`, `tokens`). `code` is OpenAI's where OpenAI names the case
(`invalid_api_key`, `model_not_found`, `rate_limit_exceeded`); where OpenAI's is null, a
Wharf name of the case (`missing_api_key`, `no_ready_instance`, ...).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping

from starlette.responses import JSONResponse

from gateway.relay.body import Invalid

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"
RATE_LIMITED = "rate_limit_exceeded"
# Alibaba PAI-EAS's statuses for its own form of call (/api/predict/...): an instance queue
# full (metadata.rpc.max_queue_size), and a request past metadata.rpc.keepalive.
EAS_QUEUE_FULL = 450
EAS_TIMEOUT = 408


def error_body(error_type: str, code: str, message: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def error_response(
    status: int,
    error_type: str,
    code: str,
    message: str,
    headers: Mapping[str, str] | None = None,
    param: str | None = None,
) -> JSONResponse:
    body = error_body(error_type, code, message, param)
    return JSONResponse(body, status_code=status, headers=headers)


def invalid_body(invalid: Invalid) -> JSONResponse:
    """A body the gateway will not forward: 400 (413 when too large), naming the field."""
    return error_response(
        invalid.status, INVALID_REQUEST, invalid.code, invalid.message, param=invalid.param
    )


def missing_token() -> JSONResponse:
    return error_response(
        401,
        INVALID_REQUEST,
        "missing_api_key",
        "No token given. Send the service's token as 'Authorization: Bearer <token>' "
        "(or the bare token as the Authorization header).",
        headers={"WWW-Authenticate": "Bearer"},
    )


def invalid_token(service: str | None = None) -> JSONResponse:
    what = f"for service '{service}'" if service else "for any service"
    return error_response(
        401,
        INVALID_REQUEST,
        "invalid_api_key",
        f"The token is not valid {what}. Check that you copied the token of this service or "
        "your API key, and that it has not been revoked.",
        headers={"WWW-Authenticate": "Bearer"},
    )


def key_expired(expired_at: float) -> JSONResponse:
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expired_at))
    return error_response(
        401,
        INVALID_REQUEST,
        "invalid_api_key",
        f"The API key expired at {when}. Create a new key in the console, or ask its owner "
        "to extend it.",
        headers={"WWW-Authenticate": "Bearer"},
    )


def key_not_allowed(service: str, adapter: str = "") -> JSONResponse:
    what = f"adapter '{adapter}' of service '{service}'" if adapter else f"service '{service}'"
    return error_response(
        403,
        INVALID_REQUEST,
        "key_not_allowed",
        f"The API key may not call {what}: it is limited to other services or adapters. "
        "Use a key whose scope includes it.",
    )


def unknown_service(service: str) -> JSONResponse:
    return error_response(
        404,
        INVALID_REQUEST,
        "service_not_found",
        f"No service named '{service}'. Check the service name in the URL; "
        "the console lists your services and their endpoints.",
    )


def unknown_model(model: str) -> JSONResponse:
    """A model no service serves, or none the caller may call: the same answer, as OpenAI's."""
    return error_response(
        404,
        INVALID_REQUEST,
        "model_not_found",
        f"The model '{model}' does not exist or your token may not call it. Use a service "
        "name or one of its served model names ('<model>:<adapter>' for an adapter); GET "
        "/v1/models lists the models your token can call.",
        param="model",
    )


def unsupported_route(service: str, path: str) -> JSONResponse:
    """An engine without the route called (say /v1/embeddings on a text generation model)."""
    return error_response(
        404,
        INVALID_REQUEST,
        "model_not_supported",
        f"The model of service '{service}' does not serve {path}: its engine has no such "
        "route (embeddings need an embedding model). Choose a model that serves it.",
        param="model",
    )


def request_timeout(service: str, seconds: float) -> JSONResponse:
    """EAS's 408: the request took longer than the service's metadata.rpc.keepalive."""
    return error_response(
        EAS_TIMEOUT,
        SERVER_ERROR,
        "request_timeout",
        f"Service '{service}' did not answer within its keepalive of {seconds * 1000:g} ms "
        "(metadata.rpc.keepalive: the whole request, queueing included). Retry, ask for less, "
        "or raise the service's keepalive.",
        headers={"connection": "close"},
    )


def no_ready_instance(service: str) -> JSONResponse:
    return error_response(
        503,
        SERVER_ERROR,
        "no_ready_instance",
        f"Service '{service}' has no ready instance right now; it may be starting, scaling "
        "or failing its health checks. Retry shortly, or check the service in the console.",
        headers={"Retry-After": "5"},
    )


def no_group_member(group: str) -> JSONResponse:
    """A service group none of whose members is released into it (or all weighted 0)."""
    return error_response(
        503,
        SERVER_ERROR,
        "no_group_member",
        f"Service group '{group}' has no member taking its traffic: release one "
        "(POST /api/v1/services/<name>/release) or give one a weight above 0.",
        headers={"Retry-After": "5"},
    )


def job_takes_no_calls(service: str) -> JSONResponse:
    """A job (metadata.workload_type elasticjob) runs its command to the end; nothing serves."""
    return error_response(
        409,
        INVALID_REQUEST,
        "service_is_a_job",
        f"Service '{service}' is a job (metadata.workload_type: elasticjob): it runs its "
        "command to the end and takes no calls. Read its status and logs in the console.",
    )


def adapter_not_loaded(service: str, adapter: str) -> JSONResponse:
    """An adapter of the spec that no ready instance has loaded yet (or could not load)."""
    return error_response(
        503,
        SERVER_ERROR,
        "adapter_not_loaded",
        f"Adapter '{adapter}' of service '{service}' is not loaded on a ready instance yet: "
        "it was just added, or failed to load (the service's adapters say why). Retry shortly.",
        headers={"Retry-After": "5"},
    )


def activation_queue_full(service: str, bound: int) -> JSONResponse:
    """A service scaled to zero already holds as many requests as it may while it starts."""
    return error_response(
        503,
        SERVER_ERROR,
        "activation_queue_full",
        f"Service '{service}' is starting from zero and already holds {bound} requests "
        "waiting for its first instance (its metadata.rpc.max_queue_size, else the gateway's "
        "WHARF_GATEWAY_ACTIVATION_QUEUE). Retry in a few seconds.",
        headers={"Retry-After": "5"},
    )


def activation_timeout(service: str, seconds: float) -> JSONResponse:
    """A held request whose service did not get a ready instance in time."""
    return error_response(
        503,
        SERVER_ERROR,
        "activation_timeout",
        f"Service '{service}' is starting from zero and no instance became ready within "
        f"{seconds:g} s. Retry shortly; if this persists, check the service's events in the "
        "console (its instances may fail to start).",
        headers={"Retry-After": "10"},
    )


def routing_not_loaded() -> JSONResponse:
    return error_response(
        503,
        SERVER_ERROR,
        "routing_unavailable",
        "The gateway has not loaded its routing table yet (its Redis is unreachable). "
        "Retry shortly; if this persists, check the gateway's REDIS_URL.",
        headers={"Retry-After": "5"},
    )


def not_ready() -> JSONResponse:
    return error_response(
        503,
        SERVER_ERROR,
        "routing_unavailable",
        "The gateway has not read a routing snapshot yet: its Redis is unreachable, or the "
        "control plane has not published one. Check the gateway's REDIS_URL and that the "
        "control plane runs.",
        headers={"Retry-After": "5"},
    )


def upstream_unreachable(service: str) -> JSONResponse:
    return error_response(
        502,
        SERVER_ERROR,
        "upstream_unreachable",
        f"Could not connect to any instance of service '{service}'. Retry shortly; "
        "if this persists, check the service's instances in the console.",
    )


def upstream_failed(service: str) -> JSONResponse:
    return error_response(
        502,
        SERVER_ERROR,
        "upstream_error",
        f"The instance of service '{service}' broke off the request before answering. "
        "Retry; if this persists, check the instance's logs in the console.",
    )


def upstream_timeout(service: str, seconds: float) -> JSONResponse:
    return error_response(
        504,
        SERVER_ERROR,
        "upstream_timeout",
        f"Service '{service}' did not answer within {seconds:g} s. Retry, ask for fewer "
        "tokens, or use stream=true so output arrives as it is generated.",
    )


def rate_limited(
    error_type: str,
    message: str,
    headers: Mapping[str, str],
    *,
    retryable: bool = True,
    status: int = 429,
) -> JSONResponse:
    """A 429 as OpenAI sends it (450 for a full queue in EAS form); `retryable=False` tells
    its SDKs not to retry in vain."""
    extra = dict(headers)
    if not retryable:
        extra["x-should-retry"] = "false"
    return error_response(status, error_type, RATE_LIMITED, message, headers=extra)


def no_prefill_instance(service: str) -> JSONResponse:
    return error_response(
        503,
        SERVER_ERROR,
        "no_prefill_instance",
        f"Service '{service}' has no ready prefill instance right now. Retry shortly; to let "
        "decode serve alone meanwhile, set llm.pd.on_prefill_failure to decode_only.",
        headers={"Retry-After": "5"},
    )


def prefill_failed(service: str) -> JSONResponse:
    return error_response(
        502,
        SERVER_ERROR,
        "prefill_failed",
        f"The prefill instance of service '{service}' failed the request. Retry; if this "
        "persists, check the prefill instance's logs in the console.",
    )


def prefill_answer_too_large(service: str, limit: int) -> JSONResponse:
    return error_response(
        502,
        SERVER_ERROR,
        "prefill_answer_too_large",
        f"The prefill instance of service '{service}' answered more than the gateway's limit "
        f"of {limit} bytes (WHARF_GATEWAY_MAX_PREFILL_ANSWER_BYTES) for a one-token answer. "
        "Check the prefill instance's engine and the request's options (prompt_logprobs).",
    )


def event_too_large(service: str, limit: int) -> bytes:
    """The event that ends a stream whose engine sent an event past the gateway's limit (too
    late for a 502: the answer has started). The blank line first ends whatever part of the
    long event the client got, so that this one is read on its own."""
    body = error_body(
        SERVER_ERROR,
        "upstream_event_too_large",
        f"The instance of service '{service}' sent a streamed event longer than the gateway's "
        f"limit of {limit} bytes (WHARF_GATEWAY_MAX_SSE_EVENT_BYTES), so the stream was cut. "
        "Check the engine, or ask the operator to raise the limit.",
    )
    return b"\n\ndata: " + json.dumps(body).encode() + b"\n\n"


def route_not_found(path: str, hint: str = "") -> JSONResponse:
    return error_response(
        404,
        INVALID_REQUEST,
        "route_not_found",
        f"No route {path}. "
        + (
            hint
            or "Use /v1/completions, /v1/chat/completions, /v1/embeddings, /v1/responses, "
            "/v1/models or /api/predict/<service>/<path>."
        ),
    )


def invalid_path(path: str, reason: str) -> JSONResponse:
    """An EAS-form path whose meaning would differ between the gateway and the engine."""
    return error_response(
        400,
        INVALID_REQUEST,
        "invalid_path",
        f"The path {path} has {reason}. Send the engine's path plainly, e.g. "
        "/api/predict/<service>/v1/chat/completions.",
    )


def method_not_allowed(method: str, path: str, allowed: Collection[str]) -> JSONResponse:
    methods = ", ".join(sorted(allowed))
    return error_response(
        405,
        INVALID_REQUEST,
        "method_not_allowed",
        f"{path} does not take {method}; use {methods}.",
        headers={"Allow": methods},
    )


_METRICS_SETTINGS = (
    "set WHARF_GATEWAY_METRICS_TOKEN (the scraper sends it as 'Authorization: Bearer <token>') "
    "or WHARF_GATEWAY_METRICS_LISTEN (an address serving the metrics alone)"
)


def metrics_closed() -> JSONResponse:
    """/metrics on the gateway's port with no token configured: it names every service."""
    return error_response(
        403,
        INVALID_REQUEST,
        "metrics_closed",
        f"The gateway's metrics are not served on this port. To scrape them, {_METRICS_SETTINGS}.",
    )


def metrics_token_missing() -> JSONResponse:
    return error_response(
        401,
        INVALID_REQUEST,
        "missing_metrics_token",
        "The gateway's metrics need the operator's metrics token as 'Authorization: Bearer "
        "<token>' (WHARF_GATEWAY_METRICS_TOKEN).",
        headers={"WWW-Authenticate": "Bearer"},
    )


def metrics_token_invalid() -> JSONResponse:
    return error_response(
        401,
        INVALID_REQUEST,
        "invalid_metrics_token",
        "The token is not the gateway's metrics token (WHARF_GATEWAY_METRICS_TOKEN); a service "
        "token or API key does not open the metrics.",
        headers={"WWW-Authenticate": "Bearer"},
    )


def listener_route_not_found() -> dict:
    return error_body(INVALID_REQUEST, "route_not_found",
                      "This address serves GET /metrics only.")  # fmt: skip


def listener_method_not_allowed() -> dict:
    return error_body(INVALID_REQUEST, "method_not_allowed", "Use GET /metrics.")


def internal_error() -> JSONResponse:
    return error_response(
        500,
        SERVER_ERROR,
        "internal_error",
        "The gateway failed while answering this request. Retry; if this persists, report it "
        "with the answer's x-request-id, which the gateway's log lines carry.",
    )
