"""Single sign-on in Chromium against a real OpenID Connect provider (oidc-provider-mock, an
Authlib provider on loopback): a user signs in through it, is made in Wharf and lands in the
workspace its groups map to, with the mapped role; after the provider changes the groups, the
next sign-in changes the role; with WHARF_LOCAL_LOGIN=false the sign-in page offers SSO only.
Only the console and its API run here (Django's live server on the test database)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.db import connections

from controlplane.sso import discovery
from controlplane.sso.mapping import parse_group_roles
from controlplane.workspaces.models import Membership
from tests.browser.chromium import browser_context, require_browser


@pytest.fixture
def provider(monkeypatch) -> Iterator[str]:
    """The provider's issuer URL; it accepts any client id and secret, as registered."""
    from oidc_provider_mock import run_server_in_thread

    monkeypatch.setenv("AUTHLIB_INSECURE_TRANSPORT", "1")  # plain HTTP on loopback
    with run_server_in_thread() as server:
        yield f"http://localhost:{server.server_port}"
    discovery.forget()


@pytest.fixture
def sso(live_server, transactional_db, settings, provider, monkeypatch) -> str:
    require_browser()
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # as test_versions explains
    settings.WHARF_OIDC_ISSUER = provider
    settings.WHARF_OIDC_CLIENT_ID = settings.OIDC_RP_CLIENT_ID = "wharf-console"
    settings.OIDC_RP_CLIENT_SECRET = "wharf-console-secret"
    settings.OIDC_RP_SCOPES = "openid email profile"
    settings.WHARF_OIDC_GROUP_ROLES = parse_group_roles("team-ml=ml:developer,ml-readers=ml:viewer")
    settings.WHARF_LOCAL_LOGIN = False
    settings.AUTHENTICATION_BACKENDS = ["controlplane.sso.backend.SsoBackend"]
    return provider


def set_groups(issuer: str, sub: str, groups: list[str]) -> None:
    """The provider's account `sub`, with these groups from now on."""
    claims = {"email": f"{sub}@example.com", "preferred_username": sub, "groups": groups}
    assert httpx.put(f"{issuer}/users/{sub}", json=claims).status_code == 204


def sign_in(console_url: str, sub: str):
    """A fresh Chromium through the console's SSO button and the provider's form, back on
    the console's Deploy page; returns what that page says."""
    with browser_context() as context:
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(console_url + "/login/?next=/deploy/")
        assert page.locator("input[name=password]").count() == 0  # SSO only
        page.click("#sso-signin")
        page.fill("input[name=sub]", sub)
        page.click("button:has-text('Authorize')")
        page.wait_for_url(console_url + "/deploy/")
        page.wait_for_selector("#workspace-switch")
        seen = {
            "workspace": page.input_value("#workspace-switch"),
            "refused": page.locator("#deploy-refused").all_inner_texts(),
        }
    connections.close_all()
    return seen


def test_signs_in_through_the_provider_with_the_mapped_workspace_and_role(live_server, sso):
    set_groups(sso, "ada", ["team-ml", "unmapped"])
    first = sign_in(live_server.url, "ada")
    assert first == {"workspace": "ml", "refused": []}  # a developer may deploy
    ada = get_user_model().objects.get(sso_identity__subject="ada")
    assert (ada.username, ada.email, ada.has_usable_password()) == (
        "ada", "ada@example.com", False,
    )  # fmt: skip
    assert Membership.objects.get(user=ada).role == "developer"

    set_groups(sso, "ada", ["ml-readers"])
    second = sign_in(live_server.url, "ada")
    assert second["workspace"] == "ml"
    assert "Your role in workspace ml is viewer" in second["refused"][0]
    assert list(Membership.objects.filter(user=ada).values_list("role", flat=True)) == ["viewer"]
    assert get_user_model().objects.filter(sso_identity__subject="ada").count() == 1


def test_with_local_login_off_a_password_sent_anyway_is_refused(live_server, sso):
    get_user_model().objects.create_user("lin", password="a-local-password", is_staff=True)
    with browser_context() as context:
        page = context.new_page()
        page.goto(live_server.url + "/login/")
        assert page.locator("input[name=password]").count() == 0
        token = next(c["value"] for c in context.cookies() if c["name"] == "csrftoken")
        # The form a page from before the switch would still post, from this browser.
        answer = page.request.post(
            live_server.url + "/login/",
            form={"username": "lin", "password": "a-local-password"},
            headers={"X-CSRFToken": token, "Referer": live_server.url + "/login/"},
        )
        assert answer.status == 403
        assert "Password sign-in is turned off" in answer.text()
        assert page.goto(live_server.url + "/").url.startswith(live_server.url + "/login/")
    connections.close_all()
