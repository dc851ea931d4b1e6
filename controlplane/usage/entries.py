"""One usage hash's fields (contracts.usage), sorted into entries the database can hold and
poison the flush sets aside, so that one bad entry never stops the others being counted.

An entry is one service and key id's counts of one minute. It is written whole or not at all:
an entry with one count that is not a count (or a service name or key id no column can hold)
is poison as a whole, since writing its requests without its tokens would skew every average.
A field that is not `<service>|<key id>|<kind>` at all belongs to no entry: it is poison alone.
A key id that names no ApiKey (any more) is not poison: usage is kept by id, not by reference,
and the calls were made; the service's owner and staff still see them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from contracts.usage import parse_field, split_model
from controlplane.tokens.api.values import text

# contracts.usage.KINDS -> UsageRecord columns
COLUMNS = {
    "prompt": "prompt_tokens",
    "completion": "completion_tokens",
    "requests": "requests",
    "latency_ms": "latency_ms",
    "ttft_ms": "ttft_ms",
    "batch_prompt": "batch_prompt_tokens",
    "batch_completion": "batch_completion_tokens",
    "batch_requests": "batch_requests",
}
# One minute of one key's calls: a million requests of a million milliseconds each is 10**12.
# This leaves room for that and keeps a row's sum far below a bigint column's 2**63.
MAX_COUNT = 10**15
MAX_SERVICE = 63  # UsageRecord.service
MAX_ADAPTER = 64  # UsageRecord.adapter
MAX_KEY_ID = 32  # UsageRecord.key_id
MAX_HASH_NAME = 200  # UsageBatch.name, which names the flushing key
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LAST_MINUTE = (datetime(9999, 12, 31, 23, 59, tzinfo=UTC) - EPOCH) // timedelta(minutes=1)
_COUNT = re.compile(r"-?[0-9]{1,20}")  # what HINCRBY writes; int() would also take "１２ "

Raw = bytes | str  # as Redis answers, with or without decode_responses


@dataclass
class Entry:
    counts: dict[str, int]  # UsageRecord column -> count, only those above 0
    fields: dict[Raw, Raw] = field(default_factory=dict)  # as read, for the dead letter


@dataclass(frozen=True)
class Poison:
    label: str  # "<service>|<key id>", or the field itself
    reason: str
    fields: dict[Raw, Raw]  # as read, so a person can look at them or count them again


def hash_problem(key: str, minute: int) -> str | None:
    """Why the flushing key `key` of epoch minute `minute` cannot be written at all, if so."""
    if len(key) > MAX_HASH_NAME:
        return f"its name is longer than {MAX_HASH_NAME} characters (UsageBatch.name)"
    if minute > LAST_MINUTE:
        return "its minute is after the year 9999"
    return None


def minute_start(minute: int) -> datetime:
    return EPOCH + timedelta(minutes=minute)


def sort_fields(fields: Mapping[Raw, Raw]) -> tuple[dict[tuple[str, str], Entry], list[Poison]]:
    """The hash's entries by (service, key id), and its poison."""
    groups: dict[tuple[str, str], dict[Raw, Raw]] = {}
    kinds: dict[tuple[str, str], dict[str, Raw]] = {}
    poison = []
    for raw_field, raw_value in fields.items():
        try:
            service, key_id, kind = parse_field(_text(raw_field))
            column = COLUMNS[kind]
        except (ValueError, KeyError):  # also UnicodeDecodeError
            label = _label(raw_field)
            reason = "not a usage field: <service>|<key id>|<" + "|".join(COLUMNS) + ">"
            poison.append(Poison(label, reason, {raw_field: raw_value}))
            continue
        groups.setdefault((service, key_id), {})[raw_field] = raw_value
        kinds.setdefault((service, key_id), {})[column] = raw_value
    entries = {}
    for (service, key_id), raw_fields in groups.items():
        try:
            counts = _entry_counts(service, key_id, kinds[(service, key_id)])
        except ValueError as exc:
            poison.append(Poison(f"{service}|{key_id}", str(exc), raw_fields))
            continue
        if counts:
            entries[(service, key_id)] = Entry(counts, raw_fields)
    return entries, poison


def _entry_counts(service: str, key_id: str, values: dict[str, Raw]) -> dict[str, int]:
    name, adapter = split_model(service)
    try:
        text(name, MAX_SERVICE)
    except ValueError as exc:
        raise ValueError(f"service name: {exc}") from None
    try:
        if adapter:
            text(adapter, MAX_ADAPTER)
    except ValueError as exc:
        raise ValueError(f"adapter name: {exc}") from None
    try:
        text(key_id, MAX_KEY_ID)
    except ValueError as exc:
        raise ValueError(f"key id: {exc}") from None
    counts = {column: _count(column, raw) for column, raw in values.items()}
    return {column: count for column, count in counts.items() if count > 0}


def _count(column: str, raw: Raw) -> int:
    try:
        value = _text(raw)
    except UnicodeDecodeError:
        value = ""
    if not _COUNT.fullmatch(value) or not 0 <= int(value) <= MAX_COUNT:
        raise ValueError(f"{column}: {_label(raw)!r} is not a count from 0 to {MAX_COUNT}")
    return int(value)


def _text(value: Raw) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _label(value: Raw) -> str:
    """For a log line: the text, whatever bytes it holds, cut short."""
    readable = value.decode(errors="backslashreplace") if isinstance(value, bytes) else value
    return readable if len(readable) <= 100 else f"{readable[:100]}…"
