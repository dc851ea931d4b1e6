"""A service's request log: the prompts and answers of its calls, kept by the gateways only
when the service asks for it, for as many days as it says.

    "request_log": {"enabled": true, "keep_days": 7, "max_body_bytes": 65536}

This is the purpose of EAS's `sinker` (every request and answer persisted). `sinker` itself
stays a cloud-only field (contracts.spec_cloud): its configuration names MaxCompute tables and
SLS logstores, which Wharf has no equivalent of; Wharf's log is JSON lines on the gateways'
hosts (gateway.observe.request_log), which a team's log shipper can take from there. Pure.
"""

from __future__ import annotations

from pydantic import Field

from contracts.spec_fleet import _Strict

DEFAULT_KEEP_DAYS = 7
MAX_KEEP_DAYS = 365
DEFAULT_BODY_BYTES = 64 * 1024
MAX_BODY_BYTES = 1024 * 1024


class RequestLogSettings(_Strict):
    """What of a service's calls the gateways keep, and for how long."""

    enabled: bool = Field(
        default=False,
        description="Keep each call's request and answer (with its status, tokens and key id). "
        "Off unless set: prompts and answers are the callers' data.",
    )
    keep_days: int = Field(
        default=DEFAULT_KEEP_DAYS, ge=1, le=MAX_KEEP_DAYS,
        description="Days a day's log is kept (1: today's only); older days are deleted.",
    )  # fmt: skip
    max_body_bytes: int = Field(
        default=DEFAULT_BODY_BYTES,
        ge=0,
        le=MAX_BODY_BYTES,
        description="Bytes kept of each request and of each answer; the rest is cut and the "
        "entry marked truncated (0: neither is kept, only the call's figures).",
    )


class RequestLogged(_Strict):
    """The service spec's `request_log`."""

    request_log: RequestLogSettings | None = Field(
        default=None,
        description="A log of the service's calls, prompts and answers included; none unless "
        "enabled (Wharf's meaning for EAS's sinker).",
    )


def logged(spec: RequestLogged) -> RequestLogSettings | None:
    """The service's request log settings when it asked for one, else None."""
    settings = spec.request_log
    return settings if settings is not None and settings.enabled else None
