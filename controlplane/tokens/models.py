from __future__ import annotations

from django.conf import settings
from django.db import models

from contracts.tokens import API_TOKEN_PREFIX, SERVICE_TOKEN_PREFIX, new_token, token_digest


def digest(token: str) -> str:
    return token_digest(settings.SECRET_KEY.encode(), token)


class ServiceToken(models.Model):
    """The token an application presents to call one service through the gateway."""

    service = models.ForeignKey("services.Service", on_delete=models.CASCADE, related_name="tokens")
    digest = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12, help_text="the token's first characters")
    created_at = models.DateTimeField(auto_now_add=True)

    @classmethod
    def issue(cls, service) -> str:
        """Create a token for `service` and return its plaintext, which is never stored."""
        token = new_token(SERVICE_TOKEN_PREFIX)
        cls.objects.create(service=service, digest=digest(token), hint=token[:10])
        return token


class ApiToken(models.Model):
    """A token for the REST API, acting as its user."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    digest = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    @classmethod
    def issue(cls, user, name: str, token: str | None = None) -> str:
        token = token or new_token(API_TOKEN_PREFIX)
        cls.objects.create(user=user, name=name, digest=digest(token), hint=token[:10])
        return token
