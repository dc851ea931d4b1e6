"""The commits a service's hub models are served at, recorded in its versions
(ServiceVersion.hub_commits): the first node to stage a version's `hf://org/name@main` resolves
the branch and records the commit; every later staging of that version (another node, a
replacement, a rollback to it) reads it and stages those bytes."""

from __future__ import annotations

from django.db import transaction

from controlplane.services.events import record
from controlplane.services.models import Service, ServiceVersion


class VersionPins:
    """The hub commits of one service's versions of one spec hash."""

    def __init__(self, service: Service, spec_hash: str) -> None:
        self.service, self.spec_hash = service, spec_hash

    def _versions(self):
        return ServiceVersion.objects.filter(service=self.service, spec_hash=self.spec_hash)

    def recorded(self, ref: str) -> str | None:
        """The commit `ref` is served at, where a version of this hash records one."""
        for commits in self._versions().order_by("-number").values_list("hub_commits", flat=True):
            if ref in (commits or {}):
                return commits[ref]
        return None

    def record(self, ref: str, commit: str) -> str:
        """Record `commit` for `ref` unless a version of this hash has one already (another
        node was first); the commit to stage."""
        with transaction.atomic():
            versions = list(self._versions().select_for_update().order_by("-number"))
            for version in versions:
                if ref in (version.hub_commits or {}):
                    return version.hub_commits[ref]
            for version in versions:
                version.hub_commits = {**(version.hub_commits or {}), ref: commit}
                version.save(update_fields=["hub_commits"])
        if versions:
            numbers = ", ".join(str(v.number) for v in reversed(versions))
            record(self.service, "HubModelResolved",
                   f"{ref} is commit {commit}, recorded in version {numbers}")  # fmt: skip
        return commit
