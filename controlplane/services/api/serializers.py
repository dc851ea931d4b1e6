from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from contracts.service_groups import MAX_WEIGHT, TRAFFIC_STATES
from contracts.spec import ServiceSpec, SpecError, typed_spec
from contracts.spec_facts import model_name, replicas
from contracts.spec_queue import is_async
from controlplane.services.models import Event, Instance, Service, ServiceVersion
from controlplane.services.secrets import redact
from controlplane.services.versions import current_number


def _typed(service: Service) -> ServiceSpec | None:
    """The stored spec as typed; None for one this version can no longer read. Read once per
    row object and generation: three fields of each listed service derive from it."""
    kept = getattr(service, "_typed_spec", None)
    if kept is None or kept[0] != service.generation:
        try:
            spec = typed_spec(service.plain_spec())
        except SpecError:
            spec = None
        kept = service._typed_spec = (service.generation, spec)  # type: ignore[attr-defined]
    return kept[1]


class InstanceSerializer(serializers.ModelSerializer):
    class Meta:
        model = Instance
        fields = ["name", "role", "state", "runtime", "node", "devices", "url", "kv_port",
                  "spec_hash", "message", "restarts", "restart_at", "ready_since", "created_at",
                  "updated_at", "adapters", "gang", "rank", "master_port"]  # fmt: skip


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = Event
        fields = ["id", "created_at", "reason", "instance", "message", "actor"]


class GroupMembershipSerializer(serializers.Serializer):
    """A service's place in its service group (contracts.service_groups)."""

    name = serializers.CharField()
    traffic_state = serializers.ChoiceField(choices=TRAFFIC_STATES)
    weight = serializers.IntegerField(min_value=0, max_value=MAX_WEIGHT)


class ServiceSerializer(serializers.ModelSerializer):
    spec = serializers.SerializerMethodField()
    instances = serializers.SerializerMethodField()
    replicas = serializers.SerializerMethodField()
    endpoints = serializers.SerializerMethodField()
    version = serializers.SerializerMethodField()
    workspace = serializers.CharField(source="workspace.name", read_only=True)
    group = serializers.SerializerMethodField()

    class Meta:
        model = Service
        fields = ["name", "workspace", "desired_state", "phase", "progress", "last_error",
                  "generation", "observed_generation", "ready_instances", "instances",
                  "replicas", "endpoints", "version", "spec", "group", "created_at",
                  "updated_at"]  # fmt: skip

    @extend_schema_field(GroupMembershipSerializer(allow_null=True))
    def get_group(self, service: Service) -> dict | None:
        """Its service group (metadata.group), whether it takes the group's traffic, its
        weight there; null outside a group."""
        if service.group is None:
            return None
        return {"name": service.group.name, "traffic_state": service.traffic_state,
                "weight": service.group_weight}  # fmt: skip

    def get_version(self, service: Service) -> int | None:
        """The current version's number: annotated by a list (`current_version`), else read."""
        if hasattr(service, "current_version"):
            return service.current_version
        return current_number(service)

    def get_spec(self, service: Service) -> dict:
        return redact(service.spec)

    def get_instances(self, service: Service) -> int:
        """Instances wanted, every role together."""
        spec = _typed(service)
        return sum(replicas(spec, service.autoscale).values()) if spec else 0

    def get_replicas(self, service: Service) -> dict[str, int]:
        """Instances wanted per role ("" for a service without prefill/decode roles); an
        autoscaled role's count is its autoscaler's."""
        spec = _typed(service)
        return replicas(spec, service.autoscale) if spec else {}

    def get_endpoints(self, service: Service) -> dict[str, str]:
        gateway = settings.WHARF_GATEWAY_URL.rstrip("/")
        spec = _typed(service)
        found = {
            "eas": f"{gateway}/api/predict/{service.name}",
            "openai": f"{gateway}/v1",
            "model": model_name(spec) if spec else service.name,
        }
        if spec is not None and is_async(spec):  # EAS's input queue is "eas"; its answers:
            found["sink"] = f"{gateway}/api/predict/{service.name}/sink"
        return found


class VersionSerializer(serializers.ModelSerializer):
    """One version; its spec with secrets masked as the service's own spec is. `current` needs
    the current version's number in the context."""

    spec = serializers.SerializerMethodField()
    current = serializers.SerializerMethodField()

    class Meta:
        model = ServiceVersion
        fields = ["number", "created_at", "note", "spec_hash", "current", "hub_commits", "spec"]

    def get_spec(self, version: ServiceVersion) -> dict:
        return redact(version.spec)

    def get_current(self, version: ServiceVersion) -> bool:
        return version.number == self.context["current"]
