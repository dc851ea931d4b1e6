"""Access key pairs: what EAS's SDKs sign requests with (AccessKeyId + AccessKeySecret).

Unlike Wharf's API tokens, the secret cannot be kept as a digest: an ACS3 signature is an
HMAC keyed by the secret itself, so the verifier needs the secret. It is sealed at rest with
Wharf's secrets key (controlplane.services.sealing: Fernet, WHARF_SECRETS_KEY, rotated by
`manage.py rotate_secrets`'s keys), opened only to check a signature, and shown once.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models

from controlplane.services.sealing import seal_value, unseal_value

KEY_ID_PREFIX = "WAK"  # Alibaba's ids start LTAI; Wharf's say whose they are


def new_key_id() -> str:
    return KEY_ID_PREFIX + secrets.token_hex(10).upper()


class AccessKeyQuerySet(models.QuerySet):
    def active(self) -> AccessKeyQuerySet:
        return self.filter(revoked_at__isnull=True, user__is_active=True)


class AccessKey(models.Model):
    """A key pair acting as its user, with the user's role in one workspace."""

    key_id = models.CharField(max_length=32, unique=True, default=new_key_id)
    sealed_secret = models.TextField(help_text="the AccessKeySecret, sealed")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="access_keys"
    )
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="access_keys"
    )
    name = models.CharField(max_length=100, default="eas", help_text="what the key is for")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = AccessKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    @classmethod
    def issue(cls, user, workspace, name: str = "eas") -> tuple[AccessKey, str]:
        """A new pair; its secret returned in clear this once, stored sealed."""
        secret = secrets.token_urlsafe(30)
        key = cls.objects.create(
            user=user, workspace=workspace, name=name, sealed_secret=seal_value(secret)
        )
        return key, secret

    def secret(self) -> str:
        return unseal_value(self.sealed_secret)
