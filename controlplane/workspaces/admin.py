"""The Django admin's pages for workspaces: staff set grants and quotas there too. The grants
are checked by the same model as the API's (contracts.grants), so the admin cannot store what
the API would refuse."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from contracts.grants import GrantsError, parse_grants
from controlplane.workspaces.models import Membership, Workspace
from controlplane.workspaces.policy import wharf_claims


class WorkspaceForm(forms.ModelForm):
    class Meta:
        model = Workspace
        fields = [
            "name",
            "ceiling_services",
            "ceiling_instances",
            "ceiling_cards",
            "ceiling_queued_items",
            "quota_services",
            "quota_instances",
            "quota_cards",
            "quota_queued_items",
            "grants",
        ]

    def clean_grants(self):
        try:
            grants = parse_grants(self.cleaned_data["grants"])
        except GrantsError as exc:
            messages = [f"{k}: {' '.join(v)}" for k, v in exc.errors.items()]
            raise forms.ValidationError(messages) from None
        for pvc in grants.pvc:
            if pvc.claim in wharf_claims():
                raise forms.ValidationError(f"{pvc.claim!r} is Wharf's own claim")
        return grants.model_dump()


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    form = WorkspaceForm
    list_display = ["name", "created_at"]
    search_fields = ["name"]
    inlines = [MembershipInline]
