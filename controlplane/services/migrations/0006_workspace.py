"""Every service moves into the `default` workspace (controlplane.workspaces 0002)."""

import django.db.models.deletion
from django.db import migrations, models


def into_default(apps, schema_editor):
    default = apps.get_model("workspaces", "Workspace").objects.get(name="default")
    apps.get_model("services", "Service").objects.update(workspace=default)


class Migration(migrations.Migration):
    dependencies = [("services", "0005_pd_ports"), ("workspaces", "0002_default")]

    operations = [
        migrations.AddField(
            model_name="service",
            name="workspace",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="services",
                to="workspaces.workspace",
            ),
        ),
        migrations.RunPython(into_default, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="service",
            name="workspace",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="services",
                to="workspaces.workspace",
            ),
        ),
    ]
