"""The service page's "Open web UI" link in Chromium: from the console (Django's live server on
localhost) through a real gateway process (on 127.0.0.1: another site, as a console and its
gateway often are) to a small web application, its page, its script and its WebSocket."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest
from django.contrib.auth import get_user_model
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from contracts.routing import RoutedInstance
from launcher.stack import ROOT
from tests.api_support import client_for, member
from tests.browser.chromium import require_browser, signed_in

sys.path.insert(0, str(ROOT / "tests" / "gateway"))  # its support module, as its tests import it
from gateway_support import (  # noqa: E402
    GatewayProcess,
    ServerThread,
    forget,
    isolated_settings,
    publish,
    service,
    snapshot,
    wait_until,
)

PASSWORD = "webapp-test-password"
TOKEN_KEY = "webapp-browser-test-token-key"
SPEC = {
    "name": "sdwebui",
    "containers": [{"image": "wharf/sd-webui:1", "command": "./webui.sh", "port": 8000}],
    "metadata": {"enable_webservice": True},
}
PAGE = '<html><title>A web UI</title><p id="said">…</p><script src="static/app.js"></script>'
SCRIPT = """
const socket = new WebSocket(location.href.replace(/^http/, "ws") + "queue/join");
socket.onopen = () => socket.send("hello");
socket.onmessage = (event) => { document.getElementById("said").textContent = event.data; };
"""


async def page(request: Request) -> Response:
    return HTMLResponse(PAGE)


async def script(request: Request) -> Response:
    return Response(SCRIPT, media_type="text/javascript")


async def echo(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text("echo:" + await websocket.receive_text())
    await websocket.receive()  # until the browser leaves


@pytest.fixture
def gateway(redis_url, settings) -> Iterator[str]:
    """A gateway routing the service to the app, keyed as the control plane (WHARF_TOKEN_KEY)."""
    app = Starlette(routes=[Route("/", page), Route("/static/app.js", script),
                            WebSocketRoute("/queue/join", echo)])  # fmt: skip
    upstream = ServerThread(app).start()
    routed = service("sdwebui", [RoutedInstance("sdwebui-1", upstream.url)], [], webservice=True)
    gateway_settings = replace(isolated_settings(redis_url), secret_key=TOKEN_KEY.encode())
    publish(redis_url, gateway_settings, snapshot(1, routed))
    process = GatewayProcess(gateway_settings)
    settings.WHARF_TOKEN_KEY = TOKEN_KEY
    settings.WHARF_GATEWAY_URL = process.url
    assert wait_until(lambda: httpx.get(process.url + "/readyz").status_code == 200, 20)
    yield process.url
    process.stop()
    forget(redis_url, gateway_settings)
    upstream.stop()


def test_open_web_ui_opens_the_app_with_its_websocket(live_server, transactional_db,
                                                      monkeypatch, gateway):  # fmt: skip
    require_browser()
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # as tests/browser/test_versions
    from controlplane import intents

    monkeypatch.setattr(intents, "reconcile_service", lambda name: None)  # no worker here
    assert client_for("webapp-api").post("/api/v1/services", SPEC, format="json").status_code == 201
    member(get_user_model().objects.create_user("webapp-user", password=PASSWORD))
    with signed_in(live_server.url, "webapp-user", PASSWORD) as console:
        console.goto(f"{live_server.url}/services/sdwebui/")
        link = console.locator("#svc-webui")
        link.wait_for(state="visible")
        with console.context.expect_page() as opened:
            link.click()
        app = opened.value
        app.wait_for_load_state()
        app.locator("#said").filter(has_text="echo:hello").wait_for(timeout=15_000)
        assert app.url == f"{gateway}/web/sdwebui/"
        assert app.title() == "A web UI"
