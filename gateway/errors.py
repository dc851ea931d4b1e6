"""OpenAI-style error bodies, so OpenAI SDKs surface the gateway's messages as-is."""

from __future__ import annotations

import time
from collections.abc import Mapping

from starlette.responses import JSONResponse

from gateway.body import Invalid

INVALID_REQUEST = "invalid_request_error"
AUTHENTICATION = "authentication_error"
PERMISSION = "permission_error"
NOT_FOUND = "not_found_error"
UNAVAILABLE = "service_unavailable"
RATE_LIMITED = "rate_limit_exceeded"


def error_response(
    status: int,
    error_type: str,
    code: str,
    message: str,
    headers: Mapping[str, str] | None = None,
    param: str | None = None,
) -> JSONResponse:
    body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def invalid_body(invalid: Invalid) -> JSONResponse:
    """A body the gateway will not forward: 400 (413 when too large), naming the field."""
    return error_response(
        invalid.status, INVALID_REQUEST, invalid.code, invalid.message, param=invalid.param
    )


def missing_token() -> JSONResponse:
    return error_response(
        401,
        AUTHENTICATION,
        "missing_token",
        "No token given. Send the service's token as 'Authorization: Bearer <token>' "
        "(or the bare token as the Authorization header).",
        headers={"WWW-Authenticate": "Bearer"},
    )


def invalid_token(service: str) -> JSONResponse:
    return error_response(
        401,
        AUTHENTICATION,
        "invalid_token",
        f"The token is not valid for service '{service}'. Check that you copied the token "
        "of this service, and that it has not been revoked.",
        headers={"WWW-Authenticate": "Bearer"},
    )


def key_expired(expired_at: float) -> JSONResponse:
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expired_at))
    return error_response(
        401,
        AUTHENTICATION,
        "key_expired",
        f"The API key expired at {when}. Create a new key in the console, or ask its owner "
        "to extend it.",
        headers={"WWW-Authenticate": "Bearer"},
    )


def key_not_allowed(service: str) -> JSONResponse:
    return error_response(
        403,
        PERMISSION,
        "key_not_allowed",
        f"The API key may not call service '{service}': it is limited to other services. "
        "Use a key whose scope includes this service.",
    )


def unknown_service(service: str) -> JSONResponse:
    return error_response(
        404,
        NOT_FOUND,
        "service_not_found",
        f"No service named '{service}'. Check the service name in the URL; "
        "the console lists your services and their endpoints.",
    )


def unknown_model(model: str) -> JSONResponse:
    return error_response(
        404,
        NOT_FOUND,
        "model_not_found",
        f"No service serves the model '{model}'. Use a service name or one of its served "
        "model names; GET /v1/models lists the models your token can call.",
    )


def no_ready_instance(service: str) -> JSONResponse:
    return error_response(
        503,
        UNAVAILABLE,
        "no_ready_instance",
        f"Service '{service}' has no ready instance right now; it may be starting, scaling "
        "or failing its health checks. Retry shortly, or check the service in the console.",
        headers={"Retry-After": "5"},
    )


def routing_not_loaded() -> JSONResponse:
    return error_response(
        503,
        UNAVAILABLE,
        "routing_unavailable",
        "The gateway has not loaded its routing table yet (its Redis is unreachable). "
        "Retry shortly; if this persists, check the gateway's REDIS_URL.",
        headers={"Retry-After": "5"},
    )


def upstream_unreachable(service: str) -> JSONResponse:
    return error_response(
        502,
        UNAVAILABLE,
        "upstream_unreachable",
        f"Could not connect to any instance of service '{service}'. Retry shortly; "
        "if this persists, check the service's instances in the console.",
    )


def upstream_failed(service: str) -> JSONResponse:
    return error_response(
        502,
        UNAVAILABLE,
        "upstream_error",
        f"The instance of service '{service}' broke off the request before answering. "
        "Retry; if this persists, check the instance's logs in the console.",
    )


def upstream_timeout(service: str, seconds: float) -> JSONResponse:
    return error_response(
        504,
        UNAVAILABLE,
        "upstream_timeout",
        f"Service '{service}' did not answer within {seconds:g} s. Retry, ask for fewer "
        "tokens, or use stream=true so output arrives as it is generated.",
    )


def rate_limited(
    error_type: str, message: str, headers: Mapping[str, str], *, retryable: bool = True
) -> JSONResponse:
    """A 429 as OpenAI sends it; `retryable=False` tells its SDKs not to retry in vain."""
    extra = dict(headers)
    if not retryable:
        extra["x-should-retry"] = "false"
    return error_response(429, error_type, RATE_LIMITED, message, headers=extra)


def no_prefill_instance(service: str) -> JSONResponse:
    return error_response(
        503,
        UNAVAILABLE,
        "no_prefill_instance",
        f"Service '{service}' has no ready prefill instance right now. Retry shortly; to let "
        "decode serve alone meanwhile, set llm.pd.on_prefill_failure to decode_only.",
        headers={"Retry-After": "5"},
    )


def prefill_failed(service: str) -> JSONResponse:
    return error_response(
        502,
        UNAVAILABLE,
        "prefill_failed",
        f"The prefill instance of service '{service}' failed the request. Retry; if this "
        "persists, check the prefill instance's logs in the console.",
    )


def internal_error() -> JSONResponse:
    return error_response(
        500,
        "server_error",
        "internal_error",
        "The gateway failed while answering this request. Retry; if this persists, report it "
        "with the answer's x-request-id, which the gateway's log lines carry.",
    )
