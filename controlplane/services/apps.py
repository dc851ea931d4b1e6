from django.apps import AppConfig


class ServicesConfig(AppConfig):
    name = "controlplane.services"
    label = "services"
