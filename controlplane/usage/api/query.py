"""The query string of GET /api/v1/usage, checked: every bad parameter is named at once."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from contracts.spec_models import ADAPTER_NAME
from contracts.usage import SERVICE_TOKEN_ID
from controlplane.tokens.api.errors import Invalid
from controlplane.tokens.api.negotiation import FORMAT
from controlplane.tokens.api.values import parameter_errors, text, timestamp

GROUPS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}
DEFAULT_GROUP = "hour"
DEFAULT_RANGE = timedelta(days=1)
MAX_POINTS = 10_000  # a month by the minute would be 43,200 points: ask for hours instead
MAX_SERVICE_NAME = 63  # UsageRecord.service
BASE = "-"  # ?adapter=- : the base model's calls
PARAMETERS = ("since", "until", "group", "service", "key", "adapter", FORMAT)
ADAPTER = re.compile(ADAPTER_NAME)
# ApiKey.public_id (its pk is at most 10 digits) or the service tokens' id
KEY_ID = re.compile(rf"k[0-9]{{1,10}}|{re.escape(SERVICE_TOKEN_ID)}")


@dataclass(frozen=True)
class Query:
    since: datetime
    until: datetime
    group: str
    service: str | None
    key: str | None
    adapter: str | None = None  # one LoRA adapter's calls; "-" the base model's


def _time(params: Any, name: str, errors: dict[str, list[str]]) -> datetime | None:
    if not (value := params.get(name)):
        return None
    try:
        return timestamp(value)
    except ValueError as exc:
        errors[name] = [str(exc)]
        return None


def _service(params: Any, errors: dict[str, list[str]]) -> str | None:
    if not (value := params.get("service")):
        return None
    try:
        return text(value, MAX_SERVICE_NAME, "a service name")
    except ValueError as exc:
        errors["service"] = [str(exc)]
        return None


def _key(params: Any, errors: dict[str, list[str]]) -> str | None:
    key = params.get("key") or None
    if key is not None and not KEY_ID.fullmatch(key):
        errors["key"] = [f"a key id such as k7, or {SERVICE_TOKEN_ID!r} for service tokens"]
    return key


def parse_query(params: Any, now: datetime) -> Query:
    """The query the parameters (a QueryDict) ask for; Invalid naming every bad one otherwise."""
    errors = parameter_errors(params, PARAMETERS)
    until = _time(params, "until", errors) or now
    since = _time(params, "since", errors) or until - DEFAULT_RANGE
    if since >= until and not errors:
        errors["since"] = ["must be before until (which defaults to now)"]
    group = params.get("group") or DEFAULT_GROUP
    if group not in GROUPS:
        errors["group"] = [f"one of {', '.join(GROUPS)}"]
    elif not errors and (until - since) / GROUPS[group] > MAX_POINTS:
        errors["group"] = [f"more than {MAX_POINTS} {group}s from since to until; "
                           "group by a longer period or ask for a shorter range"]  # fmt: skip
    service, key = _service(params, errors), _key(params, errors)
    adapter = params.get("adapter") or None
    if adapter is not None and adapter != BASE and not ADAPTER.fullmatch(adapter):
        errors["adapter"] = [f"an adapter name, or {BASE!r} for the base model's calls"]
    if errors:
        raise Invalid("query", errors)
    return Query(since, until, group, service, key, adapter)
