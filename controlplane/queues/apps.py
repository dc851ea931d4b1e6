from django.apps import AppConfig


class QueuesConfig(AppConfig):
    name = "controlplane.queues"
    default_auto_field = "django.db.models.BigAutoField"
