from django.apps import AppConfig


class TokensConfig(AppConfig):
    name = "controlplane.tokens"
    label = "tokens"
