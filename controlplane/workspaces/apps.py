from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "controlplane.workspaces"
    default_auto_field = "django.db.models.BigAutoField"
