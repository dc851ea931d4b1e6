"""Web applications: a service with `metadata.enable_webservice` has its web UI served under
`/web/<service>/` to browsers holding its pass (contracts.webapp explains the sign-in).

Routes (gateway.app):
- GET /web/<service>/.wharf/signin?ticket=…  a ticket from the API becomes the pass's cookie,
  and the browser moves on to /web/<service>/;
- any method on /web/<service>/<path>: the app's <path> on one of its instances (the same one
  for one browser session, while it serves), its answer streamed back with its redirects and
  cookies kept under the prefix;
- WebSockets on the same paths (gateway.webapp.socket).

Without a pass, or with another service's: 401, and nothing reaches the app. A service without
enable_webservice has no web routes at all (404), tickets included. The pass's cookie is never
forwarded to the app; the app gets its instance's engine key, like every call.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import AsyncIterator, Sequence

import httpx
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect, HTTPConnection, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

from contracts import engine_tls, webapp
from contracts.routing import RoutedInstance, RoutedService
from gateway import errors
from gateway.observe import metrics
from gateway.relay.forwarding import runtime_of
from gateway.relay.headers import HOP_BY_HOP, upstream_request_headers
from gateway.relay.proxy import CLIENT_CLOSED

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
_ANSWER_DROP = HOP_BY_HOP | {"server", "date", "content-length"}
# The browser's own of these never reach the app: the gateway sets them (the cookie without
# the pass).
_SET_HERE = frozenset({"cookie", "x-forwarded-prefix", "x-forwarded-proto", "x-forwarded-host"})
SIGNED_IN_PAGE = (
    '<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={prefix}">'
    '<title>Signing in</title><a href="{prefix}">Open the web UI</a>\n'
)


class WebClient:
    """The HTTP client the web routes share, one per gateway process (app.state.web)."""

    def __init__(self, timeout: float) -> None:
        # httpx logs every request at INFO, query string included: a page's assets would fill
        # the gateway's log (which has no line per call either) with what browsers asked.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=10.0),
            follow_redirects=False,
            trust_env=False,
            verify=engine_tls.client_context(),  # https:// fronts (contracts.engine_tls)
        )

    async def close(self) -> None:
        await self.client.aclose()


def pick_instance(instances: Sequence[RoutedInstance], session: str) -> RoutedInstance:
    """The instance a browser session stays on: rendezvous hashing, so a session moves only
    when its instance leaves (a web app keeps its users' state in its own memory)."""
    return max(instances, key=lambda i: hashlib.sha256(f"{session}\n{i.name}".encode()).digest())


def web_service(connection: HTTPConnection) -> RoutedService | Response:
    """The service named in the path if it serves a web UI here, else the answer why not."""
    runtime = runtime_of(connection)
    if not runtime.watcher.loaded:
        return errors.routing_not_loaded()
    name = connection.path_params["service"]
    service = runtime.watcher.current.services.get(name)
    if service is None or not service.webservice:
        return errors.route_not_found(
            connection.url.path, f"No service '{name}' with metadata.enable_webservice is here."
        )
    return service


def pass_of(connection: HTTPConnection, service: str) -> webapp.WebPass | None:
    """The browser's pass to `service`, if its cookie holds a valid one."""
    secret = runtime_of(connection).settings.secret_key
    value = connection.cookies.get(webapp.COOKIE, "")
    return webapp.verify(secret, webapp.PASS, value, service, time.time())


def no_pass(connection: HTTPConnection) -> Response:
    return errors.error_response(
        401, errors.INVALID_REQUEST, "web_signin_required",
        f"Open this web application from the console's service page (Open web UI): "
        f"{connection.url.path} needs a sign-in of its own.",
    )  # fmt: skip


def is_tls(connection: HTTPConnection) -> bool:
    """Whether the browser reached the gateway over TLS (itself or a proxy in front of it)."""
    forwarded = connection.headers.get("x-forwarded-proto", "")
    return connection.url.scheme in ("https", "wss") or forwarded.lower() == "https"


async def signin(request: Request) -> Response:
    """A ticket becomes the pass's cookie; the browser goes on to the app's first page."""
    service = web_service(request)
    if isinstance(service, Response):
        return service
    secret = runtime_of(request).settings.secret_key
    ticket = webapp.verify(
        secret, webapp.TICKET, request.query_params.get("ticket", ""), service.name, time.time()
    )
    if ticket is None:
        return no_pass(request)
    value = webapp.sign(secret, webapp.PASS, service.name, time.time(), ticket.session)
    # A page of the gateway's own that moves on, not a redirect: a SameSite=Strict cookie is
    # not sent on a redirect in a navigation that another site (the console's host) started,
    # and is on one this page starts. No Referer carries the ticket on to the app.
    prefix = webapp.web_prefix(service.name)
    page = SIGNED_IN_PAGE.format(prefix=prefix)
    headers = {"set-cookie": webapp.cookie_header(value, service.name, is_tls(request)),
               "cache-control": "no-store", "referrer-policy": "no-referrer"}  # fmt: skip
    return HTMLResponse(page, headers=headers)


def app_path(connection: HTTPConnection) -> str:
    """The app's own path: what follows /web/<service>, as the browser sent it."""
    raw = connection.scope.get("raw_path") or connection.scope["path"].encode()
    tail = raw.decode("latin-1")[len(webapp.WEB_PREFIX) :].partition("/")[2]
    return "/" + tail


def app_headers(connection: HTTPConnection, service: str, instance: RoutedInstance) -> list:
    """The browser's headers for the app: the pass's cookie taken out, the engine key in."""
    client = connection.client.host if connection.client else None
    kept = upstream_request_headers(connection.headers, client, _SET_HERE)
    cookies = [
        part.strip()
        for value in connection.headers.getlist("cookie")
        for part in value.split(";")
        if part.strip() and part.strip().partition("=")[0] != webapp.COOKIE
    ]
    if cookies:
        kept.append(("cookie", "; ".join(cookies)))
    keys = runtime_of(connection).plane.engine_keys
    prefix = webapp.web_prefix(service).rstrip("/")
    kept += [keys.authorization(instance), ("x-forwarded-prefix", prefix),
             ("x-forwarded-proto", "https" if is_tls(connection) else "http")]  # fmt: skip
    if "host" in connection.headers:
        kept.append(("x-forwarded-host", connection.headers["host"]))
    return kept


def answer_headers(headers: httpx.Headers, service: str) -> list[tuple[str, str]]:
    """The app's answer headers for the browser: redirects and cookies kept under the prefix."""
    connection = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    out = []
    for name, value in headers.multi_items():
        lower = name.lower()
        if lower in _ANSWER_DROP or lower in connection:
            continue
        if lower == "location":
            value = webapp.app_location(value, service)
        elif lower == "set-cookie":
            value = webapp.app_cookie_path(value, service)
        out.append((lower, value))
    return out


class _BodyTooLargeError(Exception):
    pass


async def _body(request: Request, limit: int) -> AsyncIterator[bytes]:
    """The browser's body as it arrives, cut off past `limit` bytes."""
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise _BodyTooLargeError
        yield chunk


def body_too_large(limit: int) -> Response:
    return errors.error_response(
        413, errors.INVALID_REQUEST, "body_too_large",
        f"A web application's request body may hold up to {limit} bytes "
        "(WHARF_GATEWAY_MAX_BODY_BYTES).",
    )  # fmt: skip


async def web_page(request: Request) -> Response:
    """Any request of the browser's to the app, with a pass; streamed both ways."""
    service = web_service(request)
    if isinstance(service, Response):
        return service
    if "path" not in request.path_params:  # /web/<service>: no pass is sent here (its path)
        return RedirectResponse(webapp.web_prefix(service.name), status_code=308)
    found = pass_of(request, service.name)
    if found is None:
        return no_pass(request)
    if not service.instances:
        return errors.no_ready_instance(service.name)
    runtime = runtime_of(request)
    instance = pick_instance(service.instances, found.session)
    url = instance.url.rstrip("/") + app_path(request)
    headers = app_headers(request, service.name, instance)
    has_body = request.method not in ("GET", "HEAD", "OPTIONS")
    content = _body(request, runtime.settings.max_body_bytes) if has_body else None
    client: WebClient = request.app.state.web
    upstream = client.client.build_request(request.method, url, headers=headers, content=content)
    try:
        answer = await client.client.send(upstream, stream=True)
    except _BodyTooLargeError:
        return body_too_large(runtime.settings.max_body_bytes)
    except ClientDisconnect:  # the browser left while sending: nobody to answer
        return Response(status_code=CLIENT_CLOSED)
    except httpx.TimeoutException:
        return errors.upstream_timeout(service.name, runtime.settings.upstream_timeout)
    except httpx.RequestError as exc:
        runtime.plane.instance_failed(service.name, instance, metrics.UPSTREAM_CONNECT, exc)
        return errors.upstream_unreachable(service.name)
    return _streamed(answer, service.name)


def _streamed(answer: httpx.Response, service: str) -> Response:
    response = StreamingResponse(
        answer.aiter_raw(), status_code=answer.status_code, background=BackgroundTask(answer.aclose)
    )
    response.raw_headers = [
        (name.encode("latin-1"), value.encode("latin-1"))
        for name, value in answer_headers(answer.headers, service)
    ]
    return response
