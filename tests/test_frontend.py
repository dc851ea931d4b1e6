import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db


def test_console_requires_sign_in():
    response = Client().get("/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_console_lists_services_for_a_signed_in_user():
    from controlplane.services.models import Service

    Service.objects.create(name="tiny", spec={"name": "tiny"})
    client = Client()
    client.force_login(get_user_model().objects.create_user("bob"))
    page = client.get("/").content.decode()
    assert "tiny" in page and "/api/predict/tiny/v1/completions" in page
