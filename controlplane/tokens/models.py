from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from contracts.token_sealing import seal_token, sealing_key
from contracts.tokens import (
    API_KEY_PREFIX,
    API_TOKEN_PREFIX,
    SERVICE_TOKEN_PREFIX,
    new_token,
    token_digest,
)


def digest(token: str) -> str:
    return token_digest(settings.WHARF_TOKEN_KEY.encode(), token)


# How far a credential's last_used_at may lag: a call writes it when it is older than this,
# so a client that calls ten times a second costs one write a minute, not ten a second.
USE_NOTED_EVERY = timedelta(minutes=1)


def note_use(credential: models.Model) -> None:
    """Set `credential`'s last_used_at (an API token's, an access key's) to now, to the
    minute."""
    now = timezone.now()
    last = getattr(credential, "last_used_at", None)
    if last is None or now - last >= USE_NOTED_EVERY or last > now:
        type(credential)._default_manager.filter(pk=credential.pk).update(last_used_at=now)


def sealed(token: str) -> str:
    """The token sealed for the gateways, which check EAS's signed calls with it
    (contracts.token_sealing): only the gateways open it."""
    return seal_token(sealing_key(settings.WHARF_TOKEN_KEY.encode()), token)


class ServiceToken(models.Model):
    """The token an application presents to call one service through the gateway."""

    service = models.ForeignKey("services.Service", on_delete=models.CASCADE, related_name="tokens")
    digest = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12, help_text="the token's first characters")
    # Sealed for the gateways (see `sealed`); "" for a token issued before: it cannot sign.
    sealed = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    @classmethod
    def issue(cls, service, token: str | None = None) -> str:
        """Create a token for `service` (`token`, a fixed one its spec gives, else a new one)
        and return its plaintext, which is never stored in clear."""
        hint = token[:4] if token else ""  # a user's own token: less of it shown
        token = token or new_token(SERVICE_TOKEN_PREFIX)
        cls.objects.create(service=service, digest=digest(token), hint=hint or token[:10],
                           sealed=sealed(token))  # fmt: skip
        return token


class ApiToken(models.Model):
    """A token for the REST API, acting as its user."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    # The workspace the token acts in, with its user's role there.
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    digest = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    @classmethod
    def issue(cls, user, workspace, name: str, token: str | None = None) -> str:
        token = token or new_token(API_TOKEN_PREFIX)
        cls.objects.create(user=user, workspace=workspace, name=name, digest=digest(token),
                           hint=token[:10])  # fmt: skip
        return token


class ApiKeyQuerySet(models.QuerySet):
    def active(self, now: datetime) -> ApiKeyQuerySet:
        """Keys the gateway honours at `now`: not revoked and not yet expired."""
        unexpired = models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        return self.filter(unexpired, revoked_at__isnull=True)

    def forget_service(self, name: str) -> int:
        """Take a deleted service out of every key's scope; the number of keys changed.

        Scopes hold service names, so without this a later service of the same name would
        be reachable with keys granted for the old one. A key scoped to that service alone
        is left with an empty scope: it reaches nothing.
        """
        changed = 0
        adapters = name + ":"  # "<service>:<adapter>" entries go with their service
        for key in self.select_for_update().filter(services__isnull=False):
            kept = [s for s in key.services if s != name and not s.startswith(adapters)]
            if kept != key.services:
                key.services = kept
                key.save(update_fields=["services"])
                changed += 1
        return changed


class ApiKey(models.Model):
    """A key an application presents to the gateway: scoped to some services (or all), with
    an optional expiry and its own request, token and concurrency limits."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    # Scoped to services of this workspace only; null `services` means all of them.
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100)
    digest = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12, help_text="the key's first characters")
    services = models.JSONField(null=True, blank=True, help_text="service names; null: all")
    expires_at = models.DateTimeField(null=True, blank=True)
    rpm = models.PositiveIntegerField(null=True, blank=True, help_text="requests per minute")
    tpm = models.PositiveIntegerField(null=True, blank=True, help_text="tokens per minute")
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    # Sealed for the gateways (see `sealed`); "" for a key issued before: it cannot sign.
    sealed = models.TextField(blank=True, default="")
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    @property
    def public_id(self) -> str:
        """The id users, usage records and the gateway's counters know the key by."""
        return f"k{self.pk}"

    @classmethod
    def issue(cls, owner, workspace, name: str, **fields) -> tuple[ApiKey, str]:
        """Create a key and return it with its plaintext, which is never stored in clear."""
        key = new_token(API_KEY_PREFIX)
        api_key = cls.objects.create(
            owner=owner, workspace=workspace, name=name, digest=digest(key), hint=key[:10],
            sealed=sealed(key), **fields,
        )  # fmt: skip
        return api_key, key
