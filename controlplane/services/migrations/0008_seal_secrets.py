"""The secrets in stored specs and their versions are sealed (controlplane.services.sealing)
with this Wharf's WHARF_SECRETS_KEY; going back opens them again."""

from django.db import migrations


def _each_spec(apps, change):
    for model in ("Service", "ServiceVersion"):
        for row in apps.get_model("services", model).objects.all():
            changed = change(row.spec)
            if changed != row.spec:
                row.spec = changed
                row.save(update_fields=["spec"])


def seal_all(apps, schema_editor):
    from controlplane.services.sealing import seal

    _each_spec(apps, seal)


def unseal_all(apps, schema_editor):
    from controlplane.services.sealing import unseal

    _each_spec(apps, unseal)


class Migration(migrations.Migration):
    dependencies = [("services", "0007_event_actor")]

    operations = [migrations.RunPython(seal_all, unseal_all)]
