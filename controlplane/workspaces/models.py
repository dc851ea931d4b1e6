"""Workspaces: every service, API key, usage row, benchmark and event belongs to one, and users
are its members with a role (controlplane.workspaces.roles)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from contracts.grants import Grants, GrantsError, parse_grants
from controlplane.workspaces import roles
from controlplane.workspaces.quotas import Quotas

DEFAULT = "default"  # where the data of a Wharf from before workspaces went


class Workspace(models.Model):
    name = models.SlugField(max_length=63, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Quotas (controlplane.workspaces.quotas); null: none.
    quota_services = models.PositiveIntegerField(null=True, blank=True)
    quota_instances = models.PositiveIntegerField(null=True, blank=True)
    quota_cards = models.JSONField(default=dict, blank=True, help_text="card kind -> quota")
    quota_queued_items = models.PositiveIntegerField(null=True, blank=True)
    # Ceilings, set by staff only: the workspace's admins divide what is below them (their
    # quotas may be lower, never higher); null: none.
    ceiling_services = models.PositiveIntegerField(null=True, blank=True)
    ceiling_instances = models.PositiveIntegerField(null=True, blank=True)
    ceiling_cards = models.JSONField(default=dict, blank=True, help_text="card kind -> ceiling")
    ceiling_queued_items = models.PositiveIntegerField(null=True, blank=True)
    # What its specs may make the shared machinery do (contracts.grants.Grants); staff only.
    grants = models.JSONField(
        default=dict, blank=True,
        help_text="Operator grants (contracts.grants): host_network, process_code, dev_mode, "
        "nfs, pvc, storage_endpoints, platform_buckets, resource_groups. Empty: all closed.",
    )  # fmt: skip

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def parsed_grants(self) -> Grants:
        """Its grants; ones stored before a rule tightened count as none (closed)."""
        try:
            return parse_grants(self.grants)
        except GrantsError:
            return Grants()

    def own_quotas(self) -> Quotas:
        """The quotas its admins set."""
        return Quotas(self.quota_services, self.quota_instances, dict(self.quota_cards),
                      self.quota_queued_items)  # fmt: skip

    def ceilings(self) -> Quotas:
        """The ceilings staff set."""
        return Quotas(self.ceiling_services, self.ceiling_instances, dict(self.ceiling_cards),
                      self.ceiling_queued_items)  # fmt: skip

    def quotas(self) -> Quotas:
        """What is enforced: each quota, capped by its ceiling."""
        return self.own_quotas().within(self.ceilings())


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
