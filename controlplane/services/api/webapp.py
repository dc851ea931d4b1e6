"""POST /api/v1/services/<name>/web-ticket: a one-minute ticket to the service's web UI
(metadata.enable_webservice), which the browser trades at the gateway for a pass of some hours
(contracts.webapp). The console's "Open web UI" link is this call (frontend.views.web_ui)."""

from __future__ import annotations

import time

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts import webapp
from contracts.spec import typed_spec
from controlplane.services.api.views import live_service
from controlplane.services.models import Service
from controlplane.workspaces import roles


class NotAWebApp(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "not_a_web_application"


def web_ticket(service: Service) -> dict:
    """The ticket to `service`'s web UI and the gateway URL that signs a browser in with it;
    NotAWebApp unless its spec sets metadata.enable_webservice."""
    if not typed_spec(service.plain_spec()).metadata.enable_webservice:
        raise NotAWebApp(
            {"metadata.enable_webservice": [
                f"service {service.name!r} is not a web application; set "
                "metadata.enable_webservice to true to serve its web UI through the gateway"]}
        )  # fmt: skip
    secret = settings.WHARF_TOKEN_KEY.encode()
    ticket = webapp.sign(secret, webapp.TICKET, service.name, time.time())
    gateway = settings.WHARF_GATEWAY_URL.rstrip("/")
    signin = f"{gateway}{webapp.web_prefix(service.name)}{webapp.SIGNIN_PATH}?ticket={ticket}"
    return {"ticket": ticket, "expires_in": webapp.TICKET_SECONDS, "signin_url": signin,
            "url": f"{gateway}{webapp.web_prefix(service.name)}"}  # fmt: skip


class WebTicket(APIView):
    """A web UI calls the service as the user does: the keys right, as the online test."""

    rights = {"POST": roles.KEYS}

    def post(self, request: Request, name: str) -> Response:
        return Response(web_ticket(live_service(request, name)), status=status.HTTP_201_CREATED)
