"""The console's pages. Each is a template plus vanilla JS that calls the REST API with the
session cookie, so the console can do exactly what the signed-in user's API rights allow."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import render

from contracts.spec import ENGINES
from controlplane.services.choices import DesiredState, Phase
from controlplane.services.models import Service

# The LLM scenario form offers the engines that render a command from the llm section;
# `custom` is the custom deployment tab.
LLM_ENGINES = [engine for engine in ENGINES if engine != "custom"]


def _page(request: HttpRequest, template: str, nav: str, **extra) -> HttpResponse:
    config = {
        "api": "/api/v1",
        "gateway": settings.WHARF_GATEWAY_URL.rstrip("/"),
        # Also sets the CSRF cookie, which the JS sends back as X-CSRFToken on every write.
        "csrfToken": get_token(request),
        "engines": LLM_ENGINES,
        "phases": [phase.value for phase in Phase],
        "user": request.user.get_username(),
        "staff": request.user.is_staff,
        **extra,
    }
    return render(request, template, {"nav": nav, "config": config, **extra})


@login_required
def services(request: HttpRequest) -> HttpResponse:
    return _page(request, "frontend/services.html", "services")


@login_required
def deploy(request: HttpRequest) -> HttpResponse:
    return _page(request, "frontend/deploy.html", "deploy", edit=request.GET.get("edit", ""))


@login_required
def nodes(request: HttpRequest) -> HttpResponse:
    return _page(request, "frontend/nodes.html", "nodes")


@login_required
def service(request: HttpRequest, name: str) -> HttpResponse:
    if not Service.objects.exclude(desired_state=DesiredState.DELETED).filter(name=name).exists():
        raise Http404("no such service")
    return _page(request, "frontend/service.html", "services", service=name)
