"""Who is making the current change: set once a request is authenticated (by the API's
permission check, or by a console view), read by the audit middleware and by every event
recorded while the request is served (controlplane.services.events)."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Actor:
    user: str
    via: str  # "token <name>", "console", "command <name>"

    def __str__(self) -> str:
        return f"{self.user} ({self.via})"


CURRENT: ContextVar[Actor | None] = ContextVar("wharf_actor", default=None)


def identify(request) -> Actor:
    """The request's actor (its user, and the API token's name or the console session), kept
    on the request and made current for the events it records."""
    token = getattr(request, "auth", None)
    name = getattr(token, "name", None)
    actor = Actor(request.user.get_username(), f"token {name}" if name else "console")
    getattr(request, "_request", request).wharf_actor = actor
    CURRENT.set(actor)
    return actor


def current() -> str:
    """The current actor as events show it; "" outside a request (a worker's own event)."""
    actor = CURRENT.get()
    return str(actor) if actor else ""
