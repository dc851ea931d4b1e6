from django.apps import AppConfig


class SsoConfig(AppConfig):
    name = "controlplane.sso"
    default_auto_field = "django.db.models.BigAutoField"
