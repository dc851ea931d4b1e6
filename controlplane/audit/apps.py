from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "controlplane.audit"
    default_auto_field = "django.db.models.BigAutoField"
