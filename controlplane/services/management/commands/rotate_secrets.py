"""Seal every stored secret again with the current WHARF_SECRETS_KEY, after it was changed
(the old key moved to WHARF_SECRETS_KEY_PREVIOUS); once done, the old key may be dropped.
The secrets: those in specs, and the access key pairs' (controlplane.eas_api)."""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from controlplane.eas_api.models import AccessKey
from controlplane.services.models import Service, ServiceVersion
from controlplane.services.sealing import UnsealError, reseal, seal_value, unseal_value


class Command(BaseCommand):
    help = __doc__

    def handle(self, *args, **options):
        count = 0
        try:
            with transaction.atomic():
                for model in (Service, ServiceVersion):
                    for row in model.objects.select_for_update().only("pk", "spec"):
                        resealed = reseal(row.spec)
                        if resealed != row.spec:
                            model.objects.filter(pk=row.pk).update(spec=resealed)
                            count += 1
                keys = _reseal_access_keys()
        except UnsealError as exc:
            raise CommandError(f"nothing was changed: {exc}") from None
        self.stdout.write(f"{count} spec(s) sealed again with the current key")
        if keys:
            self.stdout.write(f"{keys} access key secret(s) sealed again with the current key")


def _reseal_access_keys() -> int:
    keys = AccessKey.objects.select_for_update().only("pk", "sealed_secret")
    for key in keys:
        resealed = seal_value(unseal_value(key.sealed_secret))
        AccessKey.objects.filter(pk=key.pk).update(sealed_secret=resealed)
    return len(keys)
