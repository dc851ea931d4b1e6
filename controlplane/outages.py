"""The API while the database or Redis cannot be reached: a 503 that says which, with
`retry-after`, rather than Django's bare 500 — and nothing to do when they are back: the next
request opens a new connection (Django closes a broken one at the end of its request).

Only the errors of a connection that is down are answered so (OperationalError and
InterfaceError from the database: refused, reset, closed; redis-py's ConnectionError and
TimeoutError); any other error is a bug and stays a 500 with its traceback in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

log = logging.getLogger(__name__)
RETRY_AFTER_S = 5
_DOWN = {
    "database": (OperationalError, InterfaceError),
    "redis": (redis.ConnectionError, redis.TimeoutError),
}


def unavailable(part: str, exc: BaseException) -> JsonResponse:
    reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    answer = JsonResponse(
        {"detail": f"The {part} cannot be reached now ({reason}); retry shortly.",
         "unavailable": part},
        status=503,
    )  # fmt: skip
    answer["Retry-After"] = str(RETRY_AFTER_S)
    return answer


class Outages:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        """A view's error (Django calls this before turning it into a 500)."""
        for part, errors in _DOWN.items():
            if isinstance(exc, errors):
                log.warning("%s %s: the %s cannot be reached: %s", request.method,
                            request.path, part, exc)  # fmt: skip
                return unavailable(part, exc)
        return None
