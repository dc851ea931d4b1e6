"""The console's pages. Each is a template plus vanilla JS that calls the REST API with the
session cookie, so the console can do exactly what the signed-in user's API rights allow."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.staticfiles import finders
from django.http import Http404, HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views.decorators.http import require_POST
from rest_framework import fields, serializers
from rest_framework.exceptions import PermissionDenied

from contracts.batch import MOVES as BATCH_STATUSES
from contracts.service_groups import MAX_WEIGHT, TRAFFIC_MODES
from contracts.spec import ENGINES, GPU_ENGINES
from controlplane.audit.actor import identify
from controlplane.services.api.canary import CanaryStart
from controlplane.services.api.mirror import MirrorChange
from controlplane.services.api.webapp import NotAWebApp, web_ticket
from controlplane.services.choices import DesiredState, Phase
from controlplane.services.models import Service
from controlplane.workspaces.access import SESSION_KEY, access, in_workspace, workspaces_of
from controlplane.workspaces.roles import KEYS, MANAGE, OWNER, RIGHTS, WRITE, refusal

# Monaco's AMD build, put here by `npm ci` in frontend/ (install_vendor.mjs); not in git.
MONACO = "frontend/vendor/monaco/vs"


def engine_cards() -> dict[str, str | None]:
    """The cards each engine's instances take, as the spec's rules count them
    (contracts.spec_rules._llm_checks): NPUs for vllm-ascend, GPUs for GPU_ENGINES, else none."""
    return {
        engine: "npu" if engine == "vllm-ascend" else "gpu" if engine in GPU_ENGINES else None
        for engine in ENGINES
    }


def editor_base() -> str:
    """Where the page loads Monaco from; "" when its files are not installed (the page then
    edits JSON in a plain text area and says so)."""
    return static(MONACO) if finders.find(f"{MONACO}/loader.js") else ""


def form_fields(serializer: type[serializers.Serializer]) -> dict[str, dict]:
    """A REST body's fields as a console form offers them: each one's default and bounds (a
    list's: those of its items, and max_items), read from the API's own serializer so that the
    form shows what the API takes when a field is left empty."""
    offered = {}
    for name, field in serializer().fields.items():
        facts = {}
        bounded = field
        if isinstance(field, serializers.ListField):
            facts["max_items"] = field.max_length
            bounded = field.child
        facts["min"] = getattr(bounded, "min_value", None)
        facts["max"] = getattr(bounded, "max_value", None)
        if field.default is not fields.empty:
            facts["default"] = field.default
        offered[name] = facts
    return offered


def _page(
    request: HttpRequest, template: str, nav: str, needs: str | None = None, **extra
) -> HttpResponse:
    """A console page; `needs`: the right its changes take, whose refusal the page shows in
    place of the controls a user without it is not offered."""
    try:
        acting = access(request)
    except PermissionDenied as exc:
        return render(request, "frontend/no_workspace.html", {"reason": exc.detail}, status=403)
    if needs and not acting.can(needs):
        extra["refusal"] = refusal(acting.role, needs, acting.workspace.name)
    config = {
        "api": "/api/v1",
        "gateway": settings.WHARF_GATEWAY_URL.rstrip("/"),
        # Also sets the CSRF cookie, which the JS sends back as X-CSRFToken on every write.
        "csrfToken": get_token(request),
        "phases": [phase.value for phase in Phase],
        "user": request.user.get_username(),
        "staff": request.user.is_staff,
        "workspace": acting.workspace.name,
        "role": acting.role,
        # What the pages offer: a viewer gets no deploy, edit or key buttons.
        "rights": sorted(right for right in RIGHTS[OWNER] if acting.can(right)),
        **extra,
    }
    context = {
        "nav": nav, "config": config, "workspace": acting.workspace.name, "role": acting.role,
        "can": {right: acting.can(right) for right in RIGHTS[OWNER]},
        "workspaces": list(workspaces_of(request.user).values_list("name", flat=True)),
        **extra,
    }  # fmt: skip
    return render(request, template, context)


@login_required
def services(request: HttpRequest) -> HttpResponse:
    return _page(request, "frontend/services.html", "services")


@login_required
def deploy(request: HttpRequest) -> HttpResponse:
    return _page(
        request, "frontend/deploy.html", "deploy", edit=request.GET.get("edit", ""),
        engineCards=engine_cards(), editor=editor_base(),
    )  # fmt: skip


@login_required
def nodes(request: HttpRequest) -> HttpResponse:
    return _page(request, "frontend/nodes.html", "nodes")


@login_required
def keys(request: HttpRequest) -> HttpResponse:
    """The workspace's API keys; the create form is generated from the API schema (keys.js)."""
    return _page(request, "frontend/keys.html", "keys", needs=KEYS)


@login_required
def workspace(request: HttpRequest) -> HttpResponse:
    """The acting workspace's members and roles, its quotas and what is used of them."""
    return _page(request, "frontend/workspace.html", "workspace", needs=MANAGE)


@login_required
def usage(request: HttpRequest) -> HttpResponse:
    """Usage across the workspace's services and keys: charts and a CSV export (usage.js)."""
    return _page(request, "frontend/usage.html", "usage")


@login_required
def audit(request: HttpRequest) -> HttpResponse:
    """The audit trail with its filters (audit.js)."""
    return _page(request, "frontend/audit.html", "audit")


@login_required
def batches(request: HttpRequest) -> HttpResponse:
    """The workspace's batches (OpenAI's Batch API): progress, errors, files, cancel
    (batches.js); cancelling takes the `write` right."""
    return _page(request, "frontend/batches.html", "batches", needs=WRITE,
                 batchStatuses=list(BATCH_STATUSES))  # fmt: skip


@login_required
def groups(request: HttpRequest) -> HttpResponse:
    """The acting workspace's service groups: modes, weights, release (groups.js)."""
    return _page(
        request, "frontend/groups.html", "groups", trafficModes=list(TRAFFIC_MODES),
        maxWeight=MAX_WEIGHT,
    )  # fmt: skip


@login_required
def service(request: HttpRequest, name: str) -> HttpResponse:
    try:
        live = Service.objects.exclude(desired_state=DesiredState.DELETED).filter(name=name)
        visible = in_workspace(request, live).exists()
    except PermissionDenied:
        visible = True  # _page shows why the user can see nothing
    if not visible:  # another workspace's service is as absent as a missing one
        raise Http404("no such service")
    return _page(
        request, "frontend/service.html", "services", service=name, editor=editor_base(),
        canaryFields=form_fields(CanaryStart), mirrorFields=form_fields(MirrorChange),
    )  # fmt: skip


@login_required
@require_POST
def switch_workspace(request: HttpRequest) -> HttpResponse:
    """The switcher's form: act in another of the user's workspaces from now on."""
    name = request.POST.get("workspace", "")
    if not workspaces_of(request.user).filter(name=name).exists():
        raise Http404("no such workspace")
    request.session[SESSION_KEY] = name
    identify(request)  # audited, as every console change
    return redirect("services")


@login_required
def web_ui(request: HttpRequest, name: str) -> HttpResponse:
    """The service page's "Open web UI" link: a ticket to the service's web application
    (controlplane.services.api.webapp), and the browser sent to the gateway to sign in with it.
    A GET, so that it is a plain link; all it does is sign this user's own browser in."""
    identify(request)
    try:
        acting = access(request)
        acting.require(KEYS)
    except PermissionDenied as exc:
        return HttpResponse(str(exc.detail), status=403, content_type="text/plain")
    live = Service.objects.exclude(desired_state=DesiredState.DELETED).filter(name=name)
    service = in_workspace(request, live).first()
    if service is None:
        raise Http404("no such service")
    try:
        return redirect(web_ticket(service)["signin_url"])
    except NotAWebApp as exc:
        why = exc.detail["metadata.enable_webservice"][0]  # type: ignore[index]
        return HttpResponse(why, status=409, content_type="text/plain")
