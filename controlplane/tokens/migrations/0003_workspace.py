"""Every API token and key moves into the `default` workspace (controlplane.workspaces 0002):
tokens act there, keys reach its services."""

import django.db.models.deletion
from django.db import migrations, models


def into_default(apps, schema_editor):
    default = apps.get_model("workspaces", "Workspace").objects.get(name="default")
    apps.get_model("tokens", "ApiToken").objects.update(workspace=default)
    apps.get_model("tokens", "ApiKey").objects.update(workspace=default)


def workspace(null: bool, related_name: str):
    return models.ForeignKey(
        null=null,
        on_delete=django.db.models.deletion.CASCADE,
        related_name=related_name,
        to="workspaces.workspace",
    )


class Migration(migrations.Migration):
    dependencies = [("tokens", "0002_apikey"), ("workspaces", "0002_default")]

    operations = [
        migrations.AddField("apitoken", "workspace", workspace(True, "api_tokens")),
        migrations.AddField("apikey", "workspace", workspace(True, "api_keys")),
        migrations.RunPython(into_default, migrations.RunPython.noop),
        migrations.AlterField("apitoken", "workspace", workspace(False, "api_tokens")),
        migrations.AlterField("apikey", "workspace", workspace(False, "api_keys")),
    ]
