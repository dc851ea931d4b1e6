"""Web applications (metadata.enable_webservice) through a real gateway process: a browser
signed in with a ticket gets the app's pages, assets, redirects, cookies and WebSockets under
/web/<service>/; without the pass, with another service's, or for a service that is no web
application, nothing reaches the app."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import pytest
from gateway_support import (
    SECRET_KEY,
    GatewayProcess,
    ServerThread,
    forget,
    isolated_settings,
    publish,
    service,
    snapshot,
    unique,
    wait_until,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from contracts import webapp
from contracts.engine_keys import engine_key
from contracts.routing import RoutedInstance

pytestmark = pytest.mark.timeout(60)

PAGE = '<html><script src="static/app.js"></script><body>a web ui</body></html>'
ASSET = "console.log('the app')"
MAX_BODY = 64 * 1024


async def page(request: Request) -> Response:
    return HTMLResponse(PAGE)


async def asset(request: Request) -> Response:
    return Response(ASSET, media_type="text/javascript")


async def seen_headers(request: Request) -> Response:
    return JSONResponse(dict(request.headers))


async def echo(request: Request) -> Response:
    return Response(await request.body(), media_type="application/octet-stream")


async def to_login(request: Request) -> Response:
    answer = RedirectResponse("/login?next=1", status_code=302)
    answer.set_cookie("app-session", "s1", path="/")
    return answer


async def socket_echo(websocket: WebSocket) -> None:
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol=offered[0] if offered else None)
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") is not None:
            await websocket.send_text("echo:" + message["text"])
        else:
            await websocket.send_bytes(message["bytes"])


def web_app() -> Starlette:
    """A small web UI: a page, its asset, a redirect that sets a cookie, and a WebSocket."""
    return Starlette(
        routes=[
            Route("/", page),
            Route("/static/app.js", asset),
            Route("/headers", seen_headers),
            Route("/echo", echo, methods=["POST"]),
            Route("/go", to_login),
            WebSocketRoute("/queue/join", socket_echo),
        ]
    )


@dataclass
class Site:
    gateway: str
    app: str  # the service serving the web app
    other: str  # another web application, on the same app
    plain: str  # a service without enable_webservice
    instance: RoutedInstance


@pytest.fixture(scope="module")
def site(redis_url: str) -> Iterator[Site]:
    upstream = ServerThread(web_app()).start()
    instance = RoutedInstance(name=unique("web-i"), url=upstream.url)
    names = unique("web-a"), unique("web-b"), unique("plain")
    routed = [service(n, [instance], [], webservice=n != names[2]) for n in names]
    settings = isolated_settings(redis_url, max_body_bytes=MAX_BODY)
    publish(redis_url, settings, snapshot(1, *routed))
    gateway = GatewayProcess(settings)
    assert wait_until(lambda: httpx.get(gateway.url + "/readyz").status_code == 200, 20)
    yield Site(gateway.url, *names, instance)
    gateway.stop()
    forget(redis_url, settings)
    upstream.stop()


def ticket(service_name: str, now: float | None = None) -> str:
    """What POST /api/v1/services/<name>/web-ticket gives (tests/test_webapp_api.py)."""
    return webapp.sign(SECRET_KEY, webapp.TICKET, service_name, now or time.time())


@contextmanager
def signed_in(site: Site, service_name: str) -> Iterator[httpx.Client]:
    """A browser's cookie jar after following the console's link to the app."""
    with httpx.Client(base_url=site.gateway, trust_env=False, timeout=10) as browser:
        answer = browser.get(
            f"/web/{service_name}/.wharf/signin", params={"ticket": ticket(service_name)}
        )
        assert answer.status_code == 200, answer.text
        assert f'content="0;url=/web/{service_name}/"' in answer.text  # moves on to the app
        assert answer.headers["referrer-policy"] == "no-referrer"  # the ticket stays here
        yield browser


def pass_cookie(browser: httpx.Client) -> str:
    return f"{webapp.COOKIE}={browser.cookies[webapp.COOKIE]}"


def ws_url(site: Site, service_name: str) -> str:
    return site.gateway.replace("http://", "ws://") + f"/web/{service_name}/queue/join"


def test_a_page_without_a_pass_is_refused(site: Site) -> None:
    answer = httpx.get(f"{site.gateway}/web/{site.app}/", trust_env=False)
    assert answer.status_code == 401
    assert "Open web UI" in answer.json()["error"]["message"]


def test_a_ticket_becomes_a_cookie_for_the_services_prefix_alone(site: Site) -> None:
    answer = httpx.get(
        f"{site.gateway}/web/{site.app}/.wharf/signin",
        params={"ticket": ticket(site.app)},
        trust_env=False,
    )
    assert answer.status_code == 200
    cookie = answer.headers["set-cookie"]
    assert f"Path=/web/{site.app}/" in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "Secure" not in cookie  # plain HTTP here; over TLS it is Secure
    behind_tls = httpx.get(
        f"{site.gateway}/web/{site.app}/.wharf/signin",
        params={"ticket": ticket(site.app)},
        headers={"x-forwarded-proto": "https"},
        trust_env=False,
    )
    assert "Secure" in behind_tls.headers["set-cookie"]


def test_with_the_pass_the_page_and_its_asset_load(site: Site) -> None:
    with signed_in(site, site.app) as browser:
        page_answer = browser.get(f"/web/{site.app}/")
        assert page_answer.status_code == 200 and page_answer.text == PAGE
        assert browser.get(f"/web/{site.app}/static/app.js").text == ASSET
        assert browser.post(f"/web/{site.app}/echo", content=b"\x00up").content == b"\x00up"
        bare = browser.get(f"/web/{site.app}", follow_redirects=False)
        assert bare.status_code == 308 and bare.headers["location"] == f"/web/{site.app}/"


def test_the_app_gets_its_engine_key_and_never_the_pass(site: Site) -> None:
    with signed_in(site, site.app) as browser:
        browser.cookies.set("theirs", "kept", path=f"/web/{site.app}/")
        forged = {"x-forwarded-prefix": "/elsewhere", "x-forwarded-proto": "gopher"}
        seen = browser.get(f"/web/{site.app}/headers", headers=forged).json()
    assert seen["authorization"] == f"Bearer {engine_key(SECRET_KEY, site.instance.name)}"
    assert seen["cookie"] == "theirs=kept"
    assert seen["x-forwarded-prefix"] == f"/web/{site.app}"
    assert seen["x-forwarded-proto"] == "http"
    assert seen["x-forwarded-host"] == site.gateway.removeprefix("http://")


def test_redirects_and_the_apps_cookies_stay_under_the_prefix(site: Site) -> None:
    with signed_in(site, site.app) as browser:
        answer = browser.get(f"/web/{site.app}/go", follow_redirects=False)
    assert answer.status_code == 302
    assert answer.headers["location"] == f"/web/{site.app}/login?next=1"
    assert f"Path=/web/{site.app}/" in answer.headers["set-cookie"]


def test_the_apps_websocket_works_with_the_pass(site: Site) -> None:
    with signed_in(site, site.app) as browser:
        cookie = pass_cookie(browser)
    headers = {"Cookie": cookie, "Origin": site.gateway}
    with connect(ws_url(site, site.app), additional_headers=headers,
                 subprotocols=["gradio"]) as socket:  # fmt: skip
        assert socket.subprotocol == "gradio"
        socket.send("hello")
        assert socket.recv(timeout=5) == "echo:hello"
        socket.send(b"\x01\x02")
        assert socket.recv(timeout=5) == b"\x01\x02"


@pytest.mark.parametrize(
    "headers",
    [{}, {"Origin": "http://elsewhere.example"}],
    ids=["without-the-pass", "from-another-sites-page"],
)
def test_a_websocket_is_refused_without_the_pass_or_from_another_site(
    site: Site, headers: dict[str, str]
) -> None:
    if headers:
        with signed_in(site, site.app) as browser:
            headers = {**headers, "Cookie": pass_cookie(browser)}
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url(site, site.app), additional_headers=headers, open_timeout=5)
    assert refused.value.response.status_code == 403


def test_another_services_path_refuses_the_pass(site: Site) -> None:
    with signed_in(site, site.app) as browser:
        cookie = pass_cookie(browser)
    answer = httpx.get(
        f"{site.gateway}/web/{site.other}/", headers={"Cookie": cookie}, trust_env=False
    )
    assert answer.status_code == 401
    with pytest.raises(InvalidStatus):
        connect(ws_url(site, site.other), additional_headers={"Cookie": cookie}, open_timeout=5)
    # A ticket to one service signs no browser in to another.
    signin = httpx.get(
        f"{site.gateway}/web/{site.other}/.wharf/signin",
        params={"ticket": ticket(site.app)},
        trust_env=False,
    )
    assert signin.status_code == 401 and "set-cookie" not in signin.headers


def test_a_service_without_enable_webservice_refuses_tickets(site: Site) -> None:
    answer = httpx.get(
        f"{site.gateway}/web/{site.plain}/.wharf/signin",
        params={"ticket": ticket(site.plain)},
        trust_env=False,
    )
    assert answer.status_code == 404 and "set-cookie" not in answer.headers
    assert "enable_webservice" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    "given",
    [
        lambda name: ticket(name, now=time.time() - webapp.TICKET_SECONDS - 1),  # expired
        lambda name: ticket(name)[:-2] + "AA",  # forged
        lambda name: webapp.sign(SECRET_KEY, webapp.PASS, name, time.time()),  # a pass, not one
        lambda name: webapp.sign(b"another deployment", webapp.TICKET, name, time.time()),
    ],
    ids=["expired", "forged", "a-pass-for-a-ticket", "another-key"],
)
def test_a_ticket_that_is_not_valid_signs_no_one_in(site: Site, given) -> None:
    answer = httpx.get(
        f"{site.gateway}/web/{site.app}/.wharf/signin",
        params={"ticket": given(site.app)},
        trust_env=False,
    )
    assert answer.status_code == 401 and "set-cookie" not in answer.headers


def test_a_body_past_the_gateways_bound_is_refused(site: Site) -> None:
    with signed_in(site, site.app) as browser:
        at_bound = browser.post(f"/web/{site.app}/echo", content=b"u" * MAX_BODY)
        assert at_bound.status_code == 200 and len(at_bound.content) == MAX_BODY

        def chunks():
            yield b"u" * MAX_BODY
            yield b"u"

        past = browser.post(f"/web/{site.app}/echo", content=chunks())
    assert past.status_code == 413
    assert "WHARF_GATEWAY_MAX_BODY_BYTES" in past.json()["error"]["message"]
