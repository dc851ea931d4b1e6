from __future__ import annotations

from django.utils import timezone
from rest_framework import serializers

from controlplane.tokens.models import ApiKey


class ApiKeySerializer(serializers.ModelSerializer):
    """What a key's owner may see again: never the key itself, never its digest."""

    id = serializers.CharField(source="public_id", read_only=True)
    owner = serializers.CharField(source="owner.get_username", read_only=True)
    workspace = serializers.CharField(source="workspace.name", read_only=True)
    state = serializers.SerializerMethodField()

    class Meta:
        model = ApiKey
        fields = [
            "id", "name", "owner", "workspace", "hint", "services", "expires_at", "rpm", "tpm",
            "max_concurrency", "state", "created_at", "revoked_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_state(self, key: ApiKey) -> str:
        if key.revoked_at is not None:
            return "revoked"
        if key.expires_at is not None and key.expires_at <= timezone.now():
            return "expired"
        return "active"
