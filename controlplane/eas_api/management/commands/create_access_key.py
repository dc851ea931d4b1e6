import os

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from controlplane.audit.models import AuditEntry
from controlplane.eas_api.models import AccessKey
from controlplane.workspaces.models import DEFAULT, Membership, Workspace


class Command(BaseCommand):
    help = (
        "Create an access key pair for USER in a workspace, for EAS's SDKs, eascmd and "
        "Terraform (/api/v2/). Prints the AccessKeyId and, once, the AccessKeySecret. The key "
        "acts with USER's role in the workspace; USER must be a member (or staff)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--workspace", default=DEFAULT)
        parser.add_argument("--name", default="eas", help="what the key is for")

    def handle(self, *args, username, workspace, name, **options):
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"no active user {username!r}; create one first")
        found = Workspace.objects.filter(name=workspace).first()
        if found is None:
            raise CommandError(f"no workspace {workspace!r}")
        if not user.is_staff and not Membership.objects.filter(workspace=found, user=user):
            raise CommandError(f"{username!r} is not a member of workspace {workspace!r}")
        key, secret = AccessKey.issue(user, found, name)
        AuditEntry.objects.create(
            workspace=found, actor=os.environ.get("USER") or "operator",
            via="command create_access_key", service="",
            action=f"create_access_key {username} --workspace {workspace} ({key.key_id})",
        )  # fmt: skip
        self.stdout.write(f"AccessKeyId: {key.key_id}\nAccessKeySecret: {secret}")
