"""The services REST API. Writes record intent only; the reconciler acts on commit."""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Max
from django.shortcuts import get_object_or_404
from rest_framework import status
from rest_framework.exceptions import NotFound, ParseError
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts.eas import normalise
from contracts.eas.written import eas_form
from contracts.instance_types import size_by_instance_type, table_in_use
from contracts.limits import limit_errors
from contracts.spec import ServiceSpec, SpecError, parse_spec
from contracts.spec_cloud import cloud_only_warnings
from contracts.spec_facts import card_need, replicas
from contracts.spec_instance import notes as instance_notes
from contracts.spec_job import is_job
from contracts.spec_labels import matches, parse_selector
from contracts.spec_rules import runtime_checks
from controlplane import intents, paging
from controlplane.cluster import cluster_errors
from controlplane.limits import tenant_limits
from controlplane.services.api.errors import SpecInvalid
from controlplane.services.api.serializers import (
    EventSerializer,
    InstanceSerializer,
    ServiceSerializer,
)
from controlplane.services.choices import DesiredState, Phase
from controlplane.services.events import record
from controlplane.services.groups import check_group, leave_group, sync_membership
from controlplane.services.models import Service
from controlplane.services.names import claim_model_names, release_model_names
from controlplane.services.routing import publish_snapshot
from controlplane.services.sealing import seal, unseal
from controlplane.services.secrets import SecretsLostError, keep_secrets, redact
from controlplane.services.versions import record_version
from controlplane.tokens.models import ServiceToken, digest
from controlplane.workspaces.access import access, in_workspace
from controlplane.workspaces.models import Workspace
from controlplane.workspaces.policy import check_spec
from controlplane.workspaces.quota_checks import check_quotas

MAX_EVENTS = 1000  # events in one answer


def _canonical(data):
    """A spec as its user wrote it (any of EAS's spellings: contracts.eas) in Wharf's one
    canonical form, which is what is validated and stored; a 400 naming what cannot be."""
    try:
        return normalise(data)
    except SpecError as exc:
        raise SpecInvalid(exc.errors) from None


def _warned(service: Service, body: dict, data: dict) -> dict:
    """`body` with the warnings `data` earns, each also an event: EAS's cloud-only fields and
    instance types Wharf does not know (FieldIgnored), what Wharf does otherwise than asked
    (FieldAdjusted); and the notes (what its instance type fills in: SizedByInstanceType)."""
    if not isinstance(data, dict):
        return {**body, "warnings": [], "notes": []}
    _, notes, unknown = size_by_instance_type(data, table_in_use())
    ignored, adjusted = unknown + cloud_only_warnings(data), instance_notes(data)
    for reason, found in (("FieldIgnored", ignored), ("FieldAdjusted", adjusted),
                          ("SizedByInstanceType", notes)):  # fmt: skip
        for warning in found:
            record(service, reason, f"{warning['field']}: {warning['message']}")
    return {**body, "warnings": ignored + adjusted, "notes": notes}


def _check_token_free(spec: ServiceSpec, service: Service | None = None) -> None:
    """A fixed token (the spec's `token`) must be no other service's."""
    taken = ServiceToken.objects.filter(digest=digest(spec.token)) if spec.token else None
    if taken is not None and taken.exclude(service=service).exists():
        raise SpecInvalid({"token": ["this token cannot be used; choose another"]})


def fix_token(service: Service, spec: ServiceSpec) -> None:
    """A spec's fixed token becomes the service's only token (the old ones stop working),
    unless it already is; published to the gateways on commit."""
    if not spec.token or service.tokens.filter(digest=digest(spec.token)).exists():
        return
    _check_token_free(spec, service)
    service.tokens.all().delete()
    ServiceToken.issue(service, spec.token)
    record(service, "TokenRotated", "service token replaced by the spec's token")
    transaction.on_commit(publish_snapshot, robust=True)


def _validated(data, workspace: Workspace | None) -> ServiceSpec:
    """The spec, checked by the schema, then by its engine and by the runtime the workers run
    (WHARF_RUNTIME); every error at once (400). Then, for a spec to save in `workspace`, by
    the workspace's grants (403)."""
    from contracts.engines import validate

    try:
        spec = parse_spec(data)
    except SpecError as exc:
        raise SpecInvalid(exc.errors) from None
    errors = {
        **validate(spec), **runtime_checks(spec, settings.WHARF_RUNTIME),
        **limit_errors(spec, tenant_limits()),
    }  # fmt: skip
    if not errors:  # a spec valid as such, which the cluster may still not run
        errors = cluster_errors(spec)
    if errors:
        raise SpecInvalid(errors)
    if workspace is not None:
        check_spec(spec, workspace)
    return spec


def update_spec(service: Service, data: dict, note: str, what: str) -> ServiceSpec:
    """Save `data` (sealed) as the service's new spec, a new version, inside the caller's
    transaction: validated, within quota, the reconciler asked on commit. `note` labels the
    version, `what` starts the Updated event."""
    spec = _validated(unseal(data), service.workspace)
    claim_model_names(spec, service)
    check_group(spec, service.workspace, service)
    check_quotas(service.workspace, spec, service.desired_state == DesiredState.RUNNING, service)
    Service.objects.filter(pk=service.pk).update(
        spec=data, generation=F("generation") + 1
    )  # intent only: the reconciler alone writes the phase
    service.refresh_from_db()
    sync_membership(service, spec)
    service.current_version = record_version(service, data, note).number  # the serializer's
    record(service, "Updated", f"{what} (generation {service.generation})")
    fix_token(service, spec)  # a PUT's fixed token
    _on_commit_reconcile(service.name)
    return spec


def _on_commit_reconcile(name: str) -> None:
    # robust: a broker outage must not fail a request whose change is already saved; the
    # periodic pass picks the change up.
    transaction.on_commit(lambda: intents.reconcile_service(name), robust=True)


def visible_services(request: Request, live: bool = True):
    """The services of the acting workspace (staff: of every one); `live`: not being deleted."""
    services = in_workspace(request, Service.objects.select_related("workspace"))
    return services.exclude(desired_state=DesiredState.DELETED) if live else services


def live_service(request: Request, name: str) -> Service:
    """The named service if the caller may see it; a 404 otherwise (another workspace's
    service is no more visible than one that does not exist)."""
    return get_object_or_404(visible_services(request), name=name)


def create_service(request: Request, sent) -> Response:
    """Create a service from `sent` (its spec as the user wrote it) in the acting workspace:
    validated, within quota, its first version and token; the reconciler asked on commit.
    Shared by the v1 API and EAS's CreateService (controlplane.eas_api)."""
    data = _canonical(sent)
    spec = _validated(data, access(request).workspace)
    _check_token_free(spec)
    if Service.objects.filter(name=spec.name).exists():
        return Response(
            {"detail": f"A service named {spec.name!r} exists; choose another name or "
             "update it with PUT.", "errors": {"name": ["already exists"]}},
            status=status.HTTP_409_CONFLICT,
        )  # fmt: skip
    try:
        with transaction.atomic():
            check_group(spec, access(request).workspace)
            check_quotas(access(request).workspace, spec, running=True)
            service = Service.objects.create(
                name=spec.name, spec=seal(data), owner=request.user,
                workspace=access(request).workspace,
            )  # fmt: skip
            claim_model_names(spec, service)
            sync_membership(service, spec)
            token = ServiceToken.issue(service, spec.token)
            first = record_version(service, service.spec, "created", new=True)
            service.current_version = first.number  # the serializer's, known: not read again
            record(service, "Created", f"service created (generation {service.generation})")
            body = _warned(service, ServiceSerializer(service).data, data)
            _on_commit_reconcile(service.name)
    except IntegrityError:  # a concurrent create of the same name won the race
        return Response({"detail": "A service with that name exists.",
                         "errors": {"name": ["already exists"]}}, status=409)  # fmt: skip
    body["token"] = token  # shown once; only its digest is kept
    return Response(body, status=status.HTTP_201_CREATED)


class ServiceList(APIView):
    def get(self, request: Request) -> Response:
        # Each one's current version in the same query; a GROUP BY drops Meta.ordering.
        services = (
            visible_services(request)
            .select_related("group")  # not in visible_services: no FOR UPDATE on an outer join
            .annotate(current_version=Max("versions__number"))
            .order_by("name")
        )
        if phase := request.query_params.get("phase"):
            if phase not in Phase.values:
                raise ParseError({"phase": [f"one of {', '.join(Phase.values)}"]})
            services = services.filter(phase=phase)
        try:
            selectors = [parse_selector(text) for text in request.query_params.getlist("label")]
        except ValueError as exc:
            raise ParseError({"label": [str(exc)]}) from None
        wanted = paging.asked(request.query_params)
        if selectors:  # labels are in the (sealed) spec: selected here, not in SQL
            chosen = [s for s in services if matches(s.spec.get("labels"), selectors)]
            page = paging.page_of_list(chosen, wanted, key=lambda s: s.name)
        else:
            page = paging.page_of_rows(services, wanted)
        return paging.paged(request, page, ServiceSerializer(page.items, many=True).data)

    def post(self, request: Request) -> Response:
        return create_service(request, request.data)


class EasFormat(JSONRenderer):
    """`?format=eas`: the service's spec alone, as EAS writes it (contracts.eas.written)."""

    format = "eas"


def replace_spec(request: Request, name: str, sent) -> Response:
    """Replace the named service's spec with `sent` (as its user wrote it; masked secrets kept):
    a new version. Shared by the v1 API's PUT and EAS's UpdateService."""
    data = _canonical(sent)
    if isinstance(data, dict) and data.get("name", name) != name:
        raise SpecInvalid({"name": ["a service cannot be renamed; create a new service"]})
    data = {**data, "name": name} if isinstance(data, dict) else data
    with transaction.atomic():
        service = live_service(request, name)
        try:
            data = seal(keep_secrets(data, service.spec))  # kept ones come sealed already
        except SecretsLostError as exc:
            raise SpecInvalid(exc.errors) from None
        update_spec(service, data, "updated", "spec updated")
        body = _warned(service, ServiceSerializer(service).data, data)
    return Response(body)


def delete_service(request: Request, name: str) -> Response:
    """Ask for the named service's deletion (its instances removed by the reconciler)."""
    with transaction.atomic():
        service = live_service(request, name)
        Service.objects.filter(pk=service.pk).update(desired_state=DesiredState.DELETED)
        release_model_names(service)
        leave_group(service)
        record(service, "Deleting", "delete requested; removing every instance")
        _on_commit_reconcile(name)
    return Response(status=status.HTTP_202_ACCEPTED)


def change_state(request: Request, name: str, action: str) -> Response:
    """`action` (start or stop) the named service: its desired state, the reconciler asked."""
    desired = {"start": DesiredState.RUNNING, "stop": DesiredState.STOPPED}.get(action)
    if desired is None:
        raise NotFound(f"unknown action {action!r}; use start or stop")
    with transaction.atomic():
        service = live_service(request, name)
        if desired == DesiredState.RUNNING:
            check_quotas(service.workspace, None, running=True, service=service)
        again = desired == DesiredState.RUNNING and _is_job(service)
        # A job started again runs again (its succeeded instances are replaced): a new intent.
        Service.objects.filter(pk=service.pk).update(
            desired_state=desired, **({"generation": F("generation") + 1} if again else {})
        )
        service.refresh_from_db()
        record(service, action.capitalize() + "Requested", f"{action} requested")
        _on_commit_reconcile(name)
    return Response(ServiceSerializer(service).data, status=status.HTTP_202_ACCEPTED)


def _is_job(service: Service) -> bool:
    try:
        return is_job(service.parsed_spec())
    except SpecError:
        return False


class ServiceDetail(APIView):
    renderer_classes = [JSONRenderer, EasFormat]

    def get(self, request: Request, name: str) -> Response:
        service = live_service(request, name)
        if request.accepted_renderer.format == EasFormat.format:
            return Response(eas_form(redact(service.spec)))
        return Response(ServiceSerializer(service).data)

    def put(self, request: Request, name: str) -> Response:
        return replace_spec(request, name, request.data)

    def delete(self, request: Request, name: str) -> Response:
        return delete_service(request, name)


class ServiceAction(APIView):
    """POST /services/<name>/start|stop."""

    def post(self, request: Request, name: str, action: str) -> Response:
        return change_state(request, name, action)


class RotateServiceToken(APIView):
    """POST rotates the service token: the old one stops working, the new one is shown once."""

    def post(self, request: Request, name: str) -> Response:
        if live_service(request, name).spec.get("token"):  # sealed, but there
            why = ("This service's token is fixed by its spec (token): update the spec with a "
                   "new token to change it.")  # fmt: skip
            return Response({"detail": why}, status=409)
        with transaction.atomic():
            service = live_service(request, name)
            service.tokens.all().delete()
            token = ServiceToken.issue(service)
            record(service, "TokenRotated", "service token replaced; the old one no longer works")
            # Published at once, as for API keys: the gateways take the new token within a
            # second, not at the reconciler's next pass.
            transaction.on_commit(publish_snapshot, robust=True)
        return Response({"name": name, "token": token}, status=status.HTTP_201_CREATED)


class ServiceInstances(APIView):
    def get(self, request: Request, name: str) -> Response:
        service = live_service(request, name)
        return Response(InstanceSerializer(service.instances.all(), many=True).data)


class ServiceEvents(APIView):
    def get(self, request: Request, name: str) -> Response:
        service = get_object_or_404(visible_services(request, live=False), name=name)
        limit = request.query_params.get("limit", "100")
        if not (limit.isascii() and limit.isdigit() and 1 <= int(limit) <= MAX_EVENTS):
            raise ParseError({"limit": [f"a whole number from 1 to {MAX_EVENTS}"]})
        limit = int(limit)
        return Response(EventSerializer(service.events.all()[:limit], many=True).data)


class SpecPreview(APIView):
    """POST /services/preview: the containers a spec would create, without creating them: one
    per role for a prefill/decode-separated service, with example card indexes; for an
    instance across hosts (unit.size > 1), each member's command too."""

    rights = None  # a computation: no workspace's data, nothing changed

    def post(self, request: Request) -> Response:
        from contracts.engines import Placement, instance_preview

        spec = _validated(_canonical(request.data), None)  # grants: checked on save
        roles = replicas(spec)
        containers = []
        for role, instances in roles.items():
            _, cards = card_need(spec, role)
            placement = Placement(
                model_store=str(settings.WHARF_MODEL_DIR), devices=tuple(range(cards)),
                role=role, service=spec.name, limits=tenant_limits(),
                otlp_endpoint=settings.WHARF_ENGINE_OTLP_ENDPOINT,
            )  # fmt: skip
            containers.append({"role": role, "instances": instances,
                               **instance_preview(spec, placement)})  # fmt: skip
        return Response({"name": spec.name, "instances": sum(roles.values()),
                         "containers": containers})  # fmt: skip
