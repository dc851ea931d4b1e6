from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from controlplane.tokens.models import ApiToken


class Command(BaseCommand):
    help = "Create an API token for a user (created as a superuser if missing) and print it once."

    def add_arguments(self, parser):
        parser.add_argument("--user", default="admin")
        parser.add_argument("--name", default="cli")

    def handle(self, *args, user: str, name: str, **options):
        user_model = get_user_model()
        account, created = user_model.objects.get_or_create(
            username=user, defaults={"is_staff": True, "is_superuser": True}
        )
        if not account.is_active:
            raise CommandError(f"user {user!r} is inactive")
        if created:
            account.set_unusable_password()
            account.save()
        self.stdout.write(ApiToken.issue(account, name))
