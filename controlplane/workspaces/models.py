"""Workspaces: every service, API key, usage row, benchmark and event belongs to one, and users
are its members with a role (controlplane.workspaces.roles)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from controlplane.workspaces import roles

DEFAULT = "default"  # where the data of a Wharf from before workspaces went


class Workspace(models.Model):
    name = models.SlugField(max_length=63, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    ROLE_CHOICES = [(role, role) for role in roles.ROLES]

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="members")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=ROLE_CHOICES)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["workspace__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "user"], name="one_membership_per_user")
        ]
