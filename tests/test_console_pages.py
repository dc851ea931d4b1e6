"""The console's self-service pages, server side: each reachable from the nav, shown to any
member of the acting workspace, with the controls for changes only where the role may make
them (the refusal in their place), and the key form's facts in the API schema it is generated
from. Their JavaScript is tested in Chromium by tests/browser/test_console_self_service.py."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from controlplane.tokens.api import validation
from controlplane.tokens.api.values import MAX_INT
from tests.api_support import member

pytestmark = pytest.mark.django_db

PAGES = {"/keys/": "keys", "/workspace/": "workspace", "/usage/": "usage", "/audit/": "audit",
         "/batches/": "batches"}  # fmt: skip


def signed_in(role: str | None, staff: bool = False) -> Client:
    user = get_user_model().objects.create_user(f"{role or 'nobody'}-user", is_staff=staff)
    if role:
        member(user, role)
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("path", PAGES)
def test_each_page_is_in_the_nav_and_marked_when_open(path):
    page = signed_in("viewer").get(path).content.decode()
    assert f'<a href="{path}" class="active">' in page
    for other in set(PAGES) - {path}:
        assert f'<a href="{other}" >' in page


@pytest.mark.parametrize("path", PAGES)
def test_each_page_needs_a_sign_in_and_a_workspace(path):
    assert Client().get(path)["Location"] == f"/login/?next={path}"
    refused = signed_in(None).get(path)
    assert refused.status_code == 403
    assert "not a member of any workspace" in refused.content.decode()


@pytest.mark.parametrize(
    ("path", "role", "offered", "refused"),
    [
        ("/keys/", "developer", 'id="key-form"', None),
        ("/keys/", "viewer", None, "Managing API keys needs the role developer or above"),
        ("/workspace/", "admin", 'id="member-form"', None),
        ("/workspace/", "developer", None, "Managing members and quotas needs the role admin"),
    ],
)
def test_changes_are_offered_only_to_roles_that_may_make_them(path, role, offered, refused):
    page = signed_in(role).get(path).content.decode()
    form = 'id="key-form"' if path == "/keys/" else 'id="member-form"'
    assert (form in page) == bool(offered)
    if path == "/workspace/":
        assert ('id="quota-form"' in page) == bool(offered)
    if refused:
        assert refused in page
    else:
        assert "needs the role" not in page


def test_staff_outside_the_workspace_may_change_everything():
    page = signed_in(None, staff=True).get("/workspace/").content.decode()
    assert 'id="member-form"' in page and 'id="quota-form"' in page


def test_the_key_form_is_generated_from_the_api_schema_with_the_checks_bounds():
    schema = signed_in("viewer").get("/api/schema/", {"format": "json"}).json()
    body = schema["paths"]["/api/v1/keys"]["post"]["requestBody"]["content"]["application/json"]
    fields = body["schema"]["properties"]
    assert set(fields) == validation.FIELDS
    assert fields["name"]["maxLength"] == validation.MAX_NAME
    assert fields["services"]["maxItems"] == validation.MAX_SERVICES
    for limit in (*validation.LIMITS, "expires_in"):
        assert (fields[limit]["minimum"], fields[limit]["maximum"]) == (1, MAX_INT)
