from django.apps import AppConfig


class NodesConfig(AppConfig):
    name = "controlplane.nodes"
    default_auto_field = "django.db.models.BigAutoField"
