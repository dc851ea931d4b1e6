"""EAS's queue API as calls: what a method and query string on `/api/predict/<svc>[/sink]` ask
of the queue (../shared/eas/CALLS.md §4). Pure: `read_call` turns a request into one of the
calls below, or QueueCallError naming the parameter.

    POST   ?<tag>=<v>&_priority_=1              Put: the body is the item, the rest are tags
    GET    ?_attrs_=true                        Attributes
    GET    ?_search_=true&_index_=N             Search: where item N stands
    GET    ?_index_=N&_length_=L&_timeout_=5s   Get: items from N (requestId=<id>: that one)
           &_raw_=false&_auto_delete_=true&<tag>=<v>
    DELETE ?_indexes_=i1,i2                     Delete
    DELETE ?_index_=N&_trunc_=true              Truncate: every item below N
    PUT    ?_indexes_=i1,i2                     Commit: taken, so gone
    GET    ?_watch_=true&_index_=N&_window_=W   Watch (a WebSocket): items pushed as they come,
           &_index_only_=false&_auto_commit_=false&<tag>=<v>
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

MAX_TAGS = 16
MAX_TAG_CHARS = 256
MAX_LENGTH = 1000  # items one Get returns at most
MAX_WINDOW = 1000
MAX_WAIT_S = 60.0
DURATION = re.compile(r"^(\d{1,7}(?:\.\d{1,3})?)(ms|s|m)?$")
UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}
REQUEST_ID = "requestId"
# EAS's reserved parameters: `_name_`; any other parameter is a tag.
RESERVED = re.compile(r"^_[a-z_]+_$")
TAG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*(?:_[A-Za-z0-9.-]+)*_?$")  # no "__" in a name


class QueueCallError(ValueError):
    """A request the queue API cannot take: `param` names the parameter."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


@dataclass(frozen=True)
class Put:
    tags: dict[str, str] = field(default_factory=dict)
    priority: int = 0


@dataclass(frozen=True)
class Attributes:
    pass


@dataclass(frozen=True)
class Search:
    index: int


@dataclass(frozen=True)
class Get:
    index: int = 0
    length: int = 1
    wait_s: float = 0.0
    raw: bool = True
    auto_delete: bool = False
    request_id: str = ""
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Delete:
    indexes: tuple[int, ...]


@dataclass(frozen=True)
class Truncate:
    below: int


@dataclass(frozen=True)
class Commit:
    indexes: tuple[int, ...]


@dataclass(frozen=True)
class Watch:
    index: int = 0
    window: int = 1
    index_only: bool = False
    auto_commit: bool = False
    tags: dict[str, str] = field(default_factory=dict)


QueueCall = Put | Attributes | Search | Get | Delete | Truncate | Commit | Watch


def _flag(query: Mapping[str, str], name: str, default: bool) -> bool:
    value = query.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise QueueCallError(name, f"{value!r} is not true or false")


def _number(query: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    value = query.get(name)
    if value is None or value == "":
        return default
    if not value.isdigit() or not low <= int(value) <= high:
        raise QueueCallError(name, f"{value!r} is not a whole number from {low} to {high}")
    return int(value)


def _indexes(query: Mapping[str, str]) -> tuple[int, ...]:
    value = query.get("_indexes_", "")
    parts = [part.strip() for part in value.split(",") if part.strip()]
    if not parts or len(parts) > MAX_LENGTH or not all(part.isdigit() for part in parts):
        raise QueueCallError("_indexes_", f"give up to {MAX_LENGTH} indexes, comma-separated")
    return tuple(int(part) for part in parts)


def wait_seconds(text: str | None) -> float:
    """`_timeout_` as EAS writes it ("5s", "500ms", "1m", or seconds), at most MAX_WAIT_S."""
    if text is None or text == "":
        return 0.0
    match = DURATION.fullmatch(text.strip())
    if not match:
        raise QueueCallError("_timeout_", f"{text!r} is not a duration such as 5s or 500ms")
    return min(float(match[1]) * UNIT_S[match[2]], MAX_WAIT_S)


def tags_of(query: Mapping[str, str]) -> dict[str, str]:
    """The parameters that are tags: every one but EAS's reserved `_name_` ones and requestId."""
    tags = {name: value for name, value in query.items()
            if not RESERVED.fullmatch(name) and name != REQUEST_ID}  # fmt: skip
    if len(tags) > MAX_TAGS:
        raise QueueCallError("tags", f"at most {MAX_TAGS} tags (query parameters) on an item")
    for name, value in tags.items():
        if not TAG_NAME.fullmatch(name):
            raise QueueCallError(name, "a tag's name is letters, digits, '.', '-' and single '_'")
        if len(name) + len(value) > MAX_TAG_CHARS:
            raise QueueCallError(name, f"a tag is at most {MAX_TAG_CHARS} characters")
    return tags


def read_call(method: str, query: Mapping[str, str], websocket: bool = False) -> QueueCall:
    """What `method` with `query` asks of a queue."""
    method = method.upper()
    if websocket or _flag(query, "_watch_", False):
        if not websocket:
            raise QueueCallError("_watch_", "a watch is a WebSocket: connect with ws:// or wss://")
        return Watch(
            index=_number(query, "_index_", 0, 0, 2**63 - 1),
            window=_number(query, "_window_", 1, 1, MAX_WINDOW),
            index_only=_flag(query, "_index_only_", False),
            auto_commit=_flag(query, "_auto_commit_", False),
            tags=tags_of(query),
        )
    if method == "POST":
        return Put(tags=tags_of(query), priority=_number(query, "_priority_", 0, 0, 1))
    if method == "PUT":
        return Commit(_indexes(query))
    if method == "DELETE":
        if _flag(query, "_trunc_", False):
            return Truncate(_number(query, "_index_", 0, 0, 2**63 - 1))
        return Delete(_indexes(query))
    if method not in ("GET", "HEAD"):
        raise QueueCallError("method", f"{method} is not a call of the queue API")
    if _flag(query, "_attrs_", False):
        return Attributes()
    if _flag(query, "_search_", False):
        if not query.get("_index_"):
            raise QueueCallError("_index_", "a search names the item's index")
        return Search(_number(query, "_index_", 0, 1, 2**63 - 1))
    return Get(
        index=_number(query, "_index_", 0, 0, 2**63 - 1),
        length=_number(query, "_length_", 1, 1, MAX_LENGTH),
        wait_s=wait_seconds(query.get("_timeout_")),
        raw=_flag(query, "_raw_", True),
        auto_delete=_flag(query, "_auto_delete_", False),
        request_id=query.get(REQUEST_ID, "")[:128],
        tags=tags_of(query),
    )
