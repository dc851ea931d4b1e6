"""Everyone who could sign in before workspaces keeps what they could do, in `default`:
superusers as its owners, staff as admins, every other user as a developer (before, any user
could deploy, change every service and create keys)."""

from django.db import migrations


def create_default(apps, schema_editor):
    workspace_model = apps.get_model("workspaces", "Workspace")
    membership_model = apps.get_model("workspaces", "Membership")
    user_model = apps.get_model("auth", "User")
    default, _ = workspace_model.objects.get_or_create(name="default")
    for user in user_model.objects.all():
        role = "owner" if user.is_superuser else "admin" if user.is_staff else "developer"
        membership_model.objects.get_or_create(
            workspace=default, user=user, defaults={"role": role}
        )


class Migration(migrations.Migration):
    dependencies = [
        ("workspaces", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunPython(create_default, migrations.RunPython.noop)]
