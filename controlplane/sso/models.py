"""What single sign-on keeps: which identity provider account is which Wharf user, and which
memberships the group mapping made (controlplane.sso.mapping explains why they are apart)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from controlplane.workspaces.models import Membership


class Identity(models.Model):
    """A user signed in through the provider: found again by the provider's subject, never by
    email or username, so no provider account can take over a local one."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="one_user_per_subject")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class MappedMembership(models.Model):
    """Marks a membership the group mapping made: the next sign-in may change or remove it.
    A membership without one was given by hand and is left alone."""

    membership = models.OneToOneField(
        Membership, on_delete=models.CASCADE, related_name="sso_mapping"
    )
