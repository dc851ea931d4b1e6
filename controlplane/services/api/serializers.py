from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from controlplane.services.models import Event, Instance, Service
from controlplane.services.secrets import redact


class InstanceSerializer(serializers.ModelSerializer):
    class Meta:
        model = Instance
        fields = ["name", "role", "state", "runtime", "node", "url", "spec_hash", "message",
                  "created_at", "updated_at"]  # fmt: skip


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = Event
        fields = ["id", "created_at", "reason", "instance", "message"]


class ServiceSerializer(serializers.ModelSerializer):
    spec = serializers.SerializerMethodField()
    instances = serializers.SerializerMethodField()
    endpoints = serializers.SerializerMethodField()

    class Meta:
        model = Service
        fields = ["name", "desired_state", "phase", "progress", "last_error", "generation",
                  "observed_generation", "ready_instances", "instances", "endpoints", "spec",
                  "created_at", "updated_at"]  # fmt: skip

    def get_spec(self, service: Service) -> dict:
        return redact(service.spec)

    def get_instances(self, service: Service) -> int:
        return service.spec.get("metadata", {}).get("instance", 1)

    def get_endpoints(self, service: Service) -> dict[str, str]:
        gateway = settings.WHARF_GATEWAY_URL.rstrip("/")
        return {
            "eas": f"{gateway}/api/predict/{service.name}",
            "openai": f"{gateway}/v1",
            "model": (service.spec.get("llm") or {}).get("served_model_name") or service.name,
        }
