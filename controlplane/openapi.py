"""The REST API's OpenAPI 3.1 schema (drf-spectacular), described here for every view in one
place: imported by controlplane.urls, so the schema at /api/schema/ is always the code's.

The service spec is not restated: its JSON Schema comes from the pydantic models
(contracts.spec, the same document as /api/v1/schema/spec) and is added as the `ServiceSpec`
component that create, update and preview take.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import serializers

from contracts import beat
from contracts.grants import Grants
from contracts.spec import ServiceSpec
from controlplane import paging
from controlplane.audit import views as audit
from controlplane.batches.openapi import describe_batch_views
from controlplane.benchmarks.api.openapi import describe_benchmark_views
from controlplane.eas_api.openapi import describe_access_key_views
from controlplane.nodes.api import views as nodes
from controlplane.nodes.api.serializers import NodeSerializer
from controlplane.queues import api as queues
from controlplane.services.api import (
    canary,
    estimate,
    groups,
    logs,
    mirror,
    schema,
    versions,
    views,
)
from controlplane.services.api.serializers import (
    EventSerializer,
    InstanceSerializer,
    ServiceSerializer,
    VersionSerializer,
)
from controlplane.tokens.api import validation as key_checks
from controlplane.tokens.api import views as keys
from controlplane.tokens.api.serializers import ApiKeySerializer
from controlplane.tokens.api.values import MAX_INT
from controlplane.usage.api import views as usage
from controlplane.workspaces.api.openapi import describe_workspace_views

SPEC = {"$ref": "#/components/schemas/ServiceSpec"}
SPEC_BODY = {"application/json": SPEC}
ERRORS = {"type": "object", "description": "`detail` and `errors`: field path -> messages",
          "properties": {"detail": {"type": "string"},
                         "errors": {"type": "object", "additionalProperties": {
                             "type": "array", "items": {"type": "string"}}}}}  # fmt: skip
OBJECT = OpenApiTypes.OBJECT
AUDIT_ENTRY = {"type": "object", "properties": {
    "at": {"type": "string", "format": "date-time"}, "workspace": {"type": ["string", "null"]},
    "actor": {"type": "string"}, "via": {"type": "string"}, "action": {"type": "string"},
    "status": {"type": ["integer", "null"]}, "service": {"type": ["string", "null"]}}}  # fmt: skip

_HANDOVER = {
    "type": "object",
    "properties": {
        "at": {"type": "string", "format": "date-time"},
        "leader": {"type": "string"},
        "previous": {"type": ["string", "null"]},
        "reason": {"type": "string", "enum": list(beat.REASONS)},
    },
}
BEAT = {"type": "object", "properties": {
    "leader": {"type": ["string", "null"], "description": "null while nobody holds the lease"},
    "since": {"type": ["string", "null"], "format": "date-time"},
    "lease_s": {"type": "number"},
    "handovers": {"type": "array", "items": _HANDOVER, "description": "newest first"}}}  # fmt: skip


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "controlplane.tokens.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "an API token from `manage.py create_api_token`"}  # fmt: skip


def add_spec_schema(result, generator, request, public):
    """Postprocessing hook: the pydantic spec's JSON Schema as components."""
    spec = ServiceSpec.model_json_schema(ref_template="#/components/schemas/{model}")
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components.update(spec.pop("$defs", {}))
    components["ServiceSpec"] = spec
    grants = Grants.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(grants.pop("$defs", {}))
    components["Grants"] = grants
    return result


def _op(op_id: str, summary: str, **kwargs) -> dict:
    responses = kwargs.pop("responses", {200: OBJECT})
    responses = {**responses, 400: ERRORS} if kwargs.get("request") else responses
    return extend_schema(operation_id=op_id, summary=summary, responses=responses, **kwargs)


def action(*names: str) -> OpenApiParameter:
    return OpenApiParameter("action", str, OpenApiParameter.PATH, enum=list(names))


class ServiceCreated(ServiceSerializer):
    token = serializers.CharField(help_text="the service token; shown once")

    class Meta(ServiceSerializer.Meta):
        fields = [*ServiceSerializer.Meta.fields, "token"]


class KeyCreated(ApiKeySerializer):
    key = serializers.CharField(help_text="the key; shown once")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]


LIMIT = {"type": "integer", "minimum": 1, "maximum": MAX_INT}
KEY_REQUEST = {"application/json": {"type": "object", "additionalProperties": False,
    "required": ["name"], "properties": {
        "name": {"type": "string", "maxLength": key_checks.MAX_NAME,
                 "description": "what the key is for"},
        "services": {"type": ["array", "null"], "items": {"type": "string"},
                     "maxItems": key_checks.MAX_SERVICES,
                     "description": "services (or service:adapter, or groups) the key may "
                                    "call; null for all"},
        "expires_at": {"type": "string", "format": "date-time",
                       "description": "when it stops working; none: never"},
        "expires_in": {**LIMIT, "description": "or: seconds from now"},
        "rpm": {**LIMIT, "description": "requests per minute"},
        "tpm": {**LIMIT, "description": "tokens per minute"},
        "max_concurrency": {**LIMIT, "description": "requests at once"}}}}  # fmt: skip


# A long list's page (controlplane.paging): the answer's Link header names the next one.
PAGE = [
    OpenApiParameter("limit", int, description=f"rows per page, 1 to {paging.MAX_LIMIT} "
                     f"(default {paging.DEFAULT_LIMIT})"),
    OpenApiParameter("after", str, description="the last name of the page before; the "
                     "answer's Link header (rel=next) gives the next page's URL"),
]  # fmt: skip


def describe_views() -> None:
    V = extend_schema_view  # noqa: N806
    V(get=_op("services_list", "The services, a page at a time (controlplane.paging)",
              responses={200: ServiceSerializer(many=True)},
              parameters=[OpenApiParameter("phase", str, description="only this phase"),
                          OpenApiParameter("label", str, many=True), *PAGE]),
      post=_op("services_create", "Create a service from its spec", request=SPEC_BODY,
               responses={201: ServiceCreated, 409: ERRORS}))(views.ServiceList)  # fmt: skip
    V(get=_op("services_get", "A service", responses={200: ServiceSerializer}),
      put=_op("services_update", "Replace a service's spec (a new version)",
              request=SPEC_BODY, responses={200: ServiceSerializer}),
      delete=_op("services_delete", "Delete a service", responses={202: None}),
      )(views.ServiceDetail)  # fmt: skip
    V(post=_op("services_action", "Start or stop a service", request=None,
               responses={202: ServiceSerializer},
               parameters=[action("start", "stop")]))(views.ServiceAction)  # fmt: skip
    V(post=_op("services_token_rotate", "Replace the service token", request=None,
               responses={201: OBJECT}))(views.RotateServiceToken)  # fmt: skip
    V(
        get=_op(
            "services_instances",
            "A service's instances",
            responses={200: InstanceSerializer(many=True)},
        )
    )(views.ServiceInstances)
    V(get=_op("services_events", "A service's events, newest first",
              responses={200: EventSerializer(many=True)},
              parameters=[OpenApiParameter("limit", int)]))(views.ServiceEvents)  # fmt: skip
    V(post=_op("services_preview", "The containers a spec would create", request=SPEC_BODY))(
        views.SpecPreview)  # fmt: skip
    V(get=_op("services_instance_logs", "An instance's engine log",
              parameters=[OpenApiParameter("tail", int)]))(logs.InstanceLogs)  # fmt: skip
    V(
        get=_op(
            "services_versions",
            "Every version of a service, newest first",
            responses={200: VersionSerializer(many=True)},
        )
    )(versions.ServiceVersions)
    V(get=_op("services_version_get", "One version", responses={200: VersionSerializer}))(
        versions.ServiceVersionDetail
    )
    V(post=_op("services_rollback", "Make an earlier version current again",
               request={"application/json": {"type": "object", "properties": {
                   "version": {"type": "integer", "minimum": 1}}}},
               responses={200: ServiceSerializer}))(versions.Rollback)  # fmt: skip
    V(get=_op("groups_list", "Every service group",
              responses={200: groups.GroupSerializer(many=True)}))(groups.GroupList)  # fmt: skip
    V(get=_op("groups_get", "A service group: members, weights, shares",
              responses={200: groups.GroupSerializer}),
      patch=_op("groups_update", "Change a group's traffic mode, session header or weights "
                "(together, in one routing change)", request=groups.GroupChange,
                responses={200: groups.GroupSerializer}))(groups.GroupDetail)  # fmt: skip
    V(post=_op("services_release", "Release a member into its group, or take it out "
               "(EAS's ReleaseService)", request=groups.Release,
               responses={200: groups.GroupSerializer}))(groups.ServiceRelease)  # fmt: skip
    V(get=_op("services_mirror_get", "Where a service's calls are mirrored, and the figures "
              "measured side by side", responses={200: mirror.MirrorState},
              parameters=[OpenApiParameter("minutes", int)]),
      put=_op("services_mirror_set", "Mirror a share of a service's calls to other services "
              "(EAS's ServiceMirror)", request=mirror.MirrorChange,
              responses={200: mirror.MirrorState}),
      delete=_op("services_mirror_delete", "Stop mirroring", responses={204: None}),
      )(mirror.ServiceMirror)  # fmt: skip
    V(get=_op("services_canary_get", "A service's latest canary release, with both sides' "
              "figures", responses={200: canary.CanaryState}),
      post=_op("services_canary_start", "Release a new version as a canary: judged step by "
               "step on errors, TTFT and inter-token latency against the stable one",
               request=canary.CanaryStart, responses={201: canary.CanaryState, 409: ERRORS}),
      )(canary.ServiceCanary)  # fmt: skip
    V(post=_op("services_canary_action", "Pause, resume, promote or abort a canary by hand",
               request=None, responses={200: canary.CanaryState},
               parameters=[action(*canary.ACTIONS)]))(canary.CanaryAction)  # fmt: skip
    V(
        get=_op(
            "services_queue",
            "An Async service's queues: items waiting, in work, given "
            "back; answers waiting in the sink",
            responses={200: queues.QueueFigures, 404: ERRORS},
        )
    )(queues.ServiceQueue)
    V(get=_op("spec_schema", "The service spec's JSON Schema", auth=[]))(schema.SpecSchema)
    V(post=_op("estimate", "Will a model fit", request=OBJECT))(estimate.Estimate)
    V(get=_op("keys_list", "API keys", responses={200: ApiKeySerializer(many=True)}),
      post=_op("keys_create", "Mint an API key", request=KEY_REQUEST,
               responses={201: KeyCreated}))(keys.KeyList)  # fmt: skip
    V(
        get=_op("keys_get", "An API key", responses={200: ApiKeySerializer}),
        delete=_op("keys_revoke", "Revoke an API key", responses={204: None}),
    )(keys.KeyDetail)
    V(get=_op("usage", "Requests and tokens used", parameters=[
        OpenApiParameter(p, str) for p in ("since", "until", "group", "service", "key")
    ]))(usage.Usage)  # fmt: skip
    V(get=_op("nodes_list", "The nodes, a page at a time (controlplane.paging)",
              responses={200: NodeSerializer(many=True)},
              parameters=[OpenApiParameter("state", str), *PAGE]))(nodes.NodeList)  # fmt: skip
    V(get=_op("nodes_get", "A node", responses={200: NodeSerializer}))(nodes.NodeDetail)
    V(get=_op("beat_leader", "Which worker host leads beat",
              responses={200: BEAT, 503: ERRORS}))(nodes.BeatLeader)  # fmt: skip
    V(post=_op("nodes_action", "Cordon, uncordon or drain a node", request=None,
               responses={200: NodeSerializer},
               parameters=[action("cordon", "uncordon", "drain")]))(nodes.NodeAction)  # fmt: skip

    describe_benchmark_views(V, _op, ERRORS)
    describe_workspace_views(V, _op, ERRORS)
    describe_access_key_views(V, _op, ERRORS)
    describe_batch_views(V, _op, ERRORS)
    V(get=_op("audit", "Who changed what, newest first", parameters=[
        OpenApiParameter(p, str) for p in ("since", "until", "service", "actor", "limit")
    ], responses={200: {"type": "array", "items": AUDIT_ENTRY}}))(audit.Audit)  # fmt: skip


describe_views()
