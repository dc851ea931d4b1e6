"""Usage recorded before workspaces belongs to the `default` one (controlplane.workspaces 0002)."""

import django.db.models.deletion
from django.db import migrations, models


def into_default(apps, schema_editor):
    default = apps.get_model("workspaces", "Workspace").objects.get(name="default")
    apps.get_model("usage", "UsageRecord").objects.update(workspace=default)


class Migration(migrations.Migration):
    dependencies = [("usage", "0003_usagebatch"), ("workspaces", "0002_default")]

    operations = [
        migrations.AddField(
            model_name="usagerecord",
            name="workspace",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="workspaces.workspace",
            ),
        ),
        migrations.RunPython(into_default, migrations.RunPython.noop),
    ]
