"""Web applications (metadata.enable_webservice) on the control plane's side: the API's
ticket, which the gateways accept (tests/gateway/test_gateway_webapp.py serves the app with
it), the console's "Open web UI" link, and the routing snapshot's flag."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from contracts import webapp
from controlplane.services.routing import build_snapshot
from tests.api_support import client_for, member

pytestmark = pytest.mark.django_db

WEB_UI = {
    "name": "sdwebui",
    "containers": [{"image": "wharf/sd-webui:1", "command": "./webui.sh --listen", "port": 8000}],
    # EAS's Terraform writes the switch as a string; it is taken as the boolean.
    "metadata": {"instance": 1, "enable_webservice": "true"},
}
PLAIN = {**WEB_UI, "name": "plain", "metadata": {"instance": 1}}


def deployed(api, spec: dict) -> None:
    answer = api.post("/api/v1/services", spec, format="json")
    assert answer.status_code == 201, answer.json()


def test_a_web_application_gets_a_ticket_the_gateways_accept(api, store, settings):
    deployed(api, WEB_UI)
    answer = api.post("/api/v1/services/sdwebui/web-ticket")
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    gateway_key = settings.WHARF_TOKEN_KEY.encode()  # the gateways' WHARF_TOKEN_KEY
    found = webapp.verify(gateway_key, webapp.TICKET, body["ticket"], "sdwebui", time.time())
    assert found is not None and found.expires <= time.time() + webapp.TICKET_SECONDS
    gateway = settings.WHARF_GATEWAY_URL.rstrip("/")
    assert body["signin_url"] == f"{gateway}/web/sdwebui/.wharf/signin?ticket={body['ticket']}"
    assert body["url"] == f"{gateway}/web/sdwebui/" and body["expires_in"] == 60


def test_a_service_that_is_not_a_web_application_gets_no_ticket(api, store):
    deployed(api, PLAIN)
    answer = api.post("/api/v1/services/plain/web-ticket")
    assert answer.status_code == 409
    assert "metadata.enable_webservice" in answer.json()["errors"]


def test_a_viewer_gets_no_ticket_and_another_workspace_sees_no_service(api, store):
    deployed(api, WEB_UI)
    viewer = client_for("vic", role="viewer")
    assert viewer.post("/api/v1/services/sdwebui/web-ticket").status_code == 403
    stranger = client_for("sam", workspace="elsewhere")
    assert stranger.post("/api/v1/services/sdwebui/web-ticket").status_code == 404


def test_the_snapshot_tells_the_gateways_which_services_are_web_applications(api, store):
    deployed(api, WEB_UI)
    deployed(api, PLAIN)
    services = build_snapshot().services  # what the next publish gives the gateways
    assert services["sdwebui"].webservice and not services["plain"].webservice


def test_the_consoles_link_sends_the_browser_to_sign_in_at_the_gateway(api, store, settings):
    deployed(api, WEB_UI)
    deployed(api, PLAIN)
    browser = Client()
    browser.force_login(api.user)
    answer = browser.get("/console/services/sdwebui/web")
    assert answer.status_code == 302
    location = answer["Location"]
    prefix = f"{settings.WHARF_GATEWAY_URL.rstrip('/')}/web/sdwebui/.wharf/signin?ticket="
    assert location.startswith(prefix)
    ticket = location.removeprefix(prefix)
    key = settings.WHARF_TOKEN_KEY.encode()
    assert webapp.verify(key, webapp.TICKET, ticket, "sdwebui", time.time())
    refused = browser.get("/console/services/plain/web")
    assert refused.status_code == 409 and b"enable_webservice" in refused.content
    viewer = get_user_model().objects.create_user("vera")
    member(viewer, "viewer")
    browser.force_login(viewer)
    assert browser.get("/console/services/sdwebui/web").status_code == 403
