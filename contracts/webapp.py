"""Web applications (EAS's `metadata.enable_webservice`): how a browser signs in to a service's
web UI (Stable Diffusion WebUI, ComfyUI, a Gradio app) served through the gateway. Pure.

A browser cannot send the service's token in a header, so:
1. the console (a signed-in user with the keys right in the service's workspace) asks the API
   for a *ticket*: a signed, one-minute pass to one service;
2. the browser takes it to the gateway's `/web/<service>/.wharf/signin?ticket=…`, which
   trades it for a *pass*: the same signature, good for some hours, in an HttpOnly,
   SameSite=Strict cookie (Secure over TLS) whose path is `/web/<service>/`;
3. the gateway serves the app's pages, assets, WebSockets and redirects under that prefix
   to anyone presenting the pass, and nothing else to it.

Both are HMACs under a key derived from the token key (WHARF_TOKEN_KEY) that the API and the
gateways share, so nothing is stored or published. A pass names its service inside the
signature: the cookie of one service opens no other, whatever path a browser sends it to.
Limits accepted on purpose: a ticket can be used more than once within its minute, and a
pass is not revoked when the user loses access before it expires (PASS_SECONDS bounds it).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

WEB_PREFIX = "/web/"  # /web/<service>/<the app's own path>
SIGNIN_PATH = ".wharf/signin"  # under the service's prefix: where a ticket becomes a pass
COOKIE = "wharf-web"  # the pass's cookie; its path keeps it to one service's prefix
TICKET_SECONDS = 60
PASS_SECONDS = 8 * 3600  # a working day; the console signs in again after it
TICKET, PASS = "ticket", "pass"
_KEY_PURPOSE = b"wharf-webapp:"  # keeps these HMACs apart from digests and engine keys
_VERSION = "v1"


@dataclass(frozen=True)
class WebPass:
    """A verified ticket or pass: whose service, until when, and the session it started (a
    random id the gateway keeps one browser on one instance with)."""

    service: str
    expires: int
    session: str


def web_prefix(service: str) -> str:
    return f"{WEB_PREFIX}{service}/"


def _key(secret: bytes) -> bytes:
    return hmac.new(secret, _KEY_PURPOSE, hashlib.sha256).digest()


def _signature(secret: bytes, kind: str, service: str, expires: int, session: str) -> str:
    message = f"{_VERSION}\n{kind}\n{service}\n{expires}\n{session}".encode()
    mac = hmac.new(_key(secret), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def sign(secret: bytes, kind: str, service: str, now: float, session: str = "") -> str:
    """A ticket or pass (`kind`) to `service`, valid from `now` for its kind's lifetime;
    `session`: the one a pass continues ("": a new one)."""
    expires = int(now) + (TICKET_SECONDS if kind == TICKET else PASS_SECONDS)
    session = session or secrets.token_urlsafe(12)
    signature = _signature(secret, kind, service, expires, session)
    return f"{_VERSION}.{service}.{expires}.{session}.{signature}"


def verify(secret: bytes, kind: str, text: str, service: str, now: float) -> WebPass | None:
    """The ticket or pass `text` if it is one of `kind`, for `service`, signed with `secret`
    and unexpired; None for anything else (the caller gives no reason: none helps a forger)."""
    parts = text.split(".")
    if len(parts) != 5 or parts[0] != _VERSION or parts[1] != service:
        return None
    _, _, expires_text, session, given = parts
    if not expires_text.isdigit() or len(expires_text) > 12 or not session:
        return None
    expires = int(expires_text)
    expected = _signature(secret, kind, service, expires, session)
    if not hmac.compare_digest(given.encode(), expected.encode()) or expires <= now:
        return None
    return WebPass(service, expires, session)


def cookie_header(value: str, service: str, secure: bool, max_age: int = PASS_SECONDS) -> str:
    """The Set-Cookie value that holds a pass: for the service's prefix alone, never readable
    by the page's scripts, never sent by another site's page (max_age 0 clears it)."""
    parts = [f"{COOKIE}={value}", f"Path={web_prefix(service)}", f"Max-Age={max_age}",
             "HttpOnly", "SameSite=Strict"]  # fmt: skip
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


def app_cookie_path(set_cookie: str, service: str) -> str:
    """An app's own Set-Cookie with its Path put under the service's prefix (`Path=/` becomes
    `Path=/web/<service>/`), so an app's cookies, like the pass, reach that app alone."""
    prefix = web_prefix(service).rstrip("/")
    parts = [part.strip() for part in set_cookie.split(";")]
    kept, path = [parts[0]], "/"
    for part in parts[1:]:
        name, _, value = part.partition("=")
        if name.strip().lower() == "path":
            path = value.strip() if value.strip().startswith("/") else "/"
        elif name.strip().lower() != "domain":  # the gateway's host, as the browser assumes
            kept.append(part)
    return "; ".join([*kept, f"Path={prefix}{path}"])


def app_location(location: str, service: str) -> str:
    """A redirect's Location, as the browser must follow it: an absolute path of the app's
    (`/login`) under the service's prefix; a relative or another site's URL as it is."""
    if location.startswith("/") and not location.startswith("//"):
        return web_prefix(service).rstrip("/") + location
    return location
