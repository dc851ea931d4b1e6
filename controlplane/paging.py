"""Pages of the API's long lists (services, nodes, API keys): `?limit=N` (1 to MAX_LIMIT,
DEFAULT_LIMIT unless given) and `?after=<name>`, the last name of the page before. The answer is
the JSON list as ever, in name order, with headers saying what else there is, as GitHub's API
does (RFC 8288):

    Link: <https://wharf.example/api/v1/nodes?limit=500&after=gpu-499>; rel="next"
    X-Total-Count: 1200

A client that reads only the body gets the first page; the CLI and the console follow `next`.
Keyset pages (name > after) cost the same at any depth and never skip or repeat a row when rows
are added or removed between two pages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode

from django.db.models import QuerySet
from rest_framework.exceptions import ParseError
from rest_framework.request import Request
from rest_framework.response import Response

DEFAULT_LIMIT = 500
MAX_LIMIT = 1000
MAX_AFTER = 200  # characters: a name, not a document

T = TypeVar("T")


@dataclass(frozen=True)
class PageAsked:
    limit: int
    after: str


@dataclass(frozen=True)
class Page:
    items: list[Any]
    total: int
    after: str | None  # the `after` of the next page; None: this is the last


def asked(query: Any) -> PageAsked:
    """`limit` and `after` from a query string; ParseError naming the bad one."""
    raw = query.get("limit")
    limit = DEFAULT_LIMIT
    if raw is not None:
        if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_LIMIT):
            raise ParseError({"limit": [f"a whole number from 1 to {MAX_LIMIT}"]})
        limit = int(raw)
    after = query.get("after", "")
    if len(after) > MAX_AFTER:
        raise ParseError({"after": [f"at most {MAX_AFTER} characters: the last name seen"]})
    return PageAsked(limit, after)


def page_of_rows(rows: QuerySet, page: PageAsked, key: str = "name") -> Page:
    """A page of a query, in `key` order, in SQL: one query for the rows, one for the count."""
    total = rows.count()
    ordered = rows.order_by(key)
    if page.after:
        ordered = ordered.filter(**{f"{key}__gt": page.after})
    items = list(ordered[: page.limit + 1])
    return _cut(items, page.limit, total, lambda item: str(getattr(item, key)))


def page_of_list(items: Iterable[T], page: PageAsked, key: Callable[[T], str]) -> Page:
    """A page of rows already in memory (filtered on what SQL cannot see), in `key` order."""
    ordered = sorted(items, key=key)
    total = len(ordered)
    rest = [item for item in ordered if key(item) > page.after] if page.after else ordered
    return _cut(rest[: page.limit + 1], page.limit, total, key)


def _cut(items: list[Any], limit: int, total: int, key: Callable[[Any], str]) -> Page:
    more = len(items) > limit
    items = items[:limit]
    return Page(items, total, key(items[-1]) if more and items else None)


def paged(request: Request, page: Page, data: Any) -> Response:
    """The page's serialized `data` with its Link (next) and X-Total-Count headers."""
    answer = Response(data)
    answer["X-Total-Count"] = str(page.total)
    if page.after is not None:
        query = {k: v for k, v in request.query_params.lists() if k != "after"}
        flat = [(k, v) for k, values in query.items() for v in values] + [("after", page.after)]
        answer["Link"] = (
            f'<{request.build_absolute_uri(request.path)}?{urlencode(flat)}>; rel="next"'
        )
    return answer
