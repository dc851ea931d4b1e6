import os

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.validators import validate_slug

from controlplane.audit.models import AuditEntry
from controlplane.tokens.models import ApiToken
from controlplane.workspaces.members import ensure_member
from controlplane.workspaces.models import DEFAULT
from controlplane.workspaces.roles import ROLES


class Command(BaseCommand):
    help = (
        "Create an API token for USER acting in a workspace, and print it once. The user, the "
        "workspace and the membership are created when missing: without --role, a new user is "
        "a superuser and owner (the operator's own account); with --role, a plain user with "
        "that role."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", nargs="?", help="the user (default: admin)")
        parser.add_argument("--user", dest="user_option", help="the same, as an option")
        parser.add_argument("--workspace", default=DEFAULT)
        parser.add_argument("--role", choices=ROLES)
        parser.add_argument("--name", default="cli", help="what the token is for")

    def handle(self, *args, username, user_option, workspace, role, name, **options):
        if username and user_option and username != user_option:
            raise CommandError("give the user once: as USER or as --user")
        username = username or user_option or "admin"
        try:
            validate_slug(workspace)
        except ValidationError:
            raise CommandError(
                f"--workspace {workspace!r}: letters, digits, - and _ only"
            ) from None
        operator = role is None
        account, created = get_user_model().objects.get_or_create(
            username=username, defaults={"is_staff": operator, "is_superuser": operator}
        )
        if not account.is_active:
            raise CommandError(f"user {username!r} is inactive")
        if created:
            account.set_unusable_password()
            account.save()
        acting = ensure_member(account, workspace, role)
        token = ApiToken.issue(account, acting, name)
        AuditEntry.objects.create(
            workspace=acting, actor=os.environ.get("USER") or "operator",
            via="command create_api_token", service="",
            action=f"create_api_token {username} --workspace {workspace} --role {role or 'owner'}",
        )  # fmt: skip
        self.stdout.write(token)
