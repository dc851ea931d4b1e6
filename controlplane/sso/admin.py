"""The Django admin's view of single sign-on: which provider account each user is, and which
memberships the group mapping made (a sign-in may change those; hand-given ones it never
does). Read only: both are written by sign-ins."""

from __future__ import annotations

from django.contrib import admin

from controlplane.sso.models import Identity, MappedMembership


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Identity)
class IdentityAdmin(ReadOnly):
    list_display = ["user", "subject", "issuer", "created_at"]
    search_fields = ["user__username", "subject"]


@admin.register(MappedMembership)
class MappedMembershipAdmin(ReadOnly):
    list_display = ["user", "workspace", "role"]
    list_select_related = ["membership__user", "membership__workspace"]
    search_fields = ["membership__user__username", "membership__workspace__name"]

    @admin.display(ordering="membership__user__username")
    def user(self, mapped: MappedMembership) -> str:
        return mapped.membership.user.username

    @admin.display(ordering="membership__workspace__name")
    def workspace(self, mapped: MappedMembership) -> str:
        return mapped.membership.workspace.name

    @admin.display()
    def role(self, mapped: MappedMembership) -> str:
        return mapped.membership.role
