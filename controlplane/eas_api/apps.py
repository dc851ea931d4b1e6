from django.apps import AppConfig


class EasApiConfig(AppConfig):
    """EAS's management OpenAPI (2021-07-01) at /api/v2/, for EAS's own SDKs, eascmd and
    Terraform, signed with Wharf-issued access key pairs."""

    name = "controlplane.eas_api"
    label = "eas_api"
