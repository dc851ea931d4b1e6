"""Single sign-on's edges in Django: the sign-in page with and without it, password sign-in
turned off (WHARF_LOCAL_LOGIN=false), a provider that does not answer, the memberships a
sign-in changes in the database, and the settings that stop start-up. The whole sign-in
through a real provider is tests/browser/test_sso.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.test import Client

from controlplane.audit.models import AuditEntry
from controlplane.sso import discovery
from controlplane.sso.mapping import parse_group_roles
from controlplane.sso.memberships import apply_group_roles
from controlplane.sso.models import Identity, MappedMembership
from controlplane.workspaces.members import ensure_member
from controlplane.workspaces.models import Membership, Workspace
from launcher.stack import ROOT

PASSWORD = "a-local-password"
SSO_BACKEND = "controlplane.sso.backend.SsoBackend"
PASSWORD_BACKEND = "django.contrib.auth.backends.ModelBackend"


@pytest.fixture
def local_user(db):
    user = get_user_model().objects.create_user("lin", password=PASSWORD, is_staff=True)
    ensure_member(user, "default", "owner")
    return user


@pytest.fixture
def sso_on(settings):
    """Single sign-on configured, at a provider nobody answers for (port 9, discard)."""
    settings.WHARF_OIDC_ISSUER = "http://127.0.0.1:9"
    settings.WHARF_OIDC_CLIENT_ID = settings.OIDC_RP_CLIENT_ID = "wharf-console"
    settings.WHARF_OIDC_LABEL = "Example ID"
    settings.AUTHENTICATION_BACKENDS = [PASSWORD_BACKEND, SSO_BACKEND]
    discovery.forget()
    return settings


@pytest.fixture
def local_login_off(sso_on):
    sso_on.WHARF_LOCAL_LOGIN = False
    sso_on.AUTHENTICATION_BACKENDS = [SSO_BACKEND]
    return sso_on


def test_without_sso_the_page_offers_passwords_only(db):
    page = Client().get("/login/").content.decode()
    assert 'name="password"' in page and 'id="sso-signin"' not in page
    assert Client().get("/oidc/authenticate/").status_code == 404


def test_with_sso_the_page_offers_both_and_passwords_still_work(sso_on, local_user):
    page = Client().get("/login/?next=/deploy/").content.decode()
    assert 'href="/oidc/authenticate/?next=/deploy/"' in page and "Sign in with Example ID" in page
    assert 'name="password"' in page
    signed_in = Client().post("/login/", {"username": "lin", "password": PASSWORD})
    assert signed_in.status_code == 302


def test_local_login_off_refuses_a_password_on_every_form(local_login_off, local_user):
    client = Client()
    page = client.get("/login/").content.decode()
    assert 'id="sso-signin"' in page and 'name="password"' not in page
    refused = client.post("/login/", {"username": "lin", "password": PASSWORD})
    assert refused.status_code == 403
    assert "Password sign-in is turned off on this Wharf; sign in with Example ID." in (
        refused.content.decode()
    )
    assert client.get("/").status_code == 302  # still signed out
    admin = client.post("/admin/login/", {"username": "lin", "password": PASSWORD})
    assert admin.status_code == 200 and client.get("/admin/").status_code == 302
    assert authenticate(username="lin", password=PASSWORD) is None


def test_a_provider_that_does_not_answer_is_a_message_on_the_sign_in_page(sso_on):
    client = Client()
    sent = client.get("/oidc/authenticate/")
    assert sent.status_code == 302 and sent["Location"] == "/login/?sso=unavailable"
    page = client.get(sent["Location"]).content.decode()
    assert "The identity provider did not answer" in page


def test_a_failed_sign_in_comes_back_with_a_message(sso_on):
    back = Client().get("/oidc/callback/?code=stolen&state=unknown")
    assert back.status_code == 302 and back["Location"] == "/login/?sso=failed"
    assert "Single sign-on did not complete" in Client().get("/login/?sso=failed").content.decode()


def test_a_sign_in_keeps_hand_given_roles_and_follows_the_groups(settings, db):
    settings.WHARF_OIDC_GROUP_ROLES = parse_group_roles("ml=ml:developer,ops=*:admin")
    Workspace.objects.create(name="web")  # beside "default", which the migrations make
    user = get_user_model().objects.create_user("ada")
    ensure_member(user, "web", "viewer")  # by hand

    def roles() -> dict[str, tuple[str, bool]]:
        found = Membership.objects.filter(user=user).select_related("workspace")
        mapped = set(MappedMembership.objects.values_list("membership_id", flat=True))
        return {m.workspace.name: (m.role, m.id in mapped) for m in found}

    apply_group_roles(user, {"ml", "ops"})
    # '*' reaches ml, made by this sign-in, and default; web's hand-given viewer stays.
    assert roles() == {"ml": ("admin", True), "default": ("admin", True), "web": ("viewer", False)}
    apply_group_roles(user, {"ml"})
    assert roles() == {"ml": ("developer", True), "web": ("viewer", False)}
    apply_group_roles(user, set())
    assert roles() == {"web": ("viewer", False)}
    trail = AuditEntry.objects.filter(actor="ada", via="single sign-on").order_by("id")
    assert [(e.workspace.name, e.action) for e in trail] == [
        ("ml", "member as admin, from the provider's groups"),
        ("default", "member as admin, from the provider's groups"),
        ("ml", "role developer (was admin), from the provider's groups"),
        ("default", "left: no group of theirs grants a role"),
        ("ml", "left: no group of theirs grants a role"),
    ]


START_UP = [
    ({"WHARF_OIDC_GROUP_ROLES": "team-ml=ml"}, "WHARF_OIDC_GROUP_ROLES: 'team-ml=ml' is not"),
    ({"WHARF_LOCAL_LOGIN": "false"}, "nobody could sign in"),
    ({"WHARF_OIDC_ISSUER": "https://id.example.com"}, "WHARF_OIDC_CLIENT_ID is not"),
]


@pytest.mark.parametrize("variables, message", START_UP)
def test_bad_sign_in_settings_stop_start_up(tmp_path, variables, message):
    env = {**os.environ, "WHARF_HOME": str(tmp_path), **variables}
    check = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert check.returncode != 0 and message in check.stderr


def test_the_admin_lists_who_signed_in_and_what_the_mapping_gave(settings, db):
    settings.WHARF_OIDC_GROUP_ROLES = parse_group_roles("ml=ml:developer")
    ada = get_user_model().objects.create_user("ada")
    Identity.objects.create(user=ada, issuer="https://id.example.com", subject="sub-ada")
    apply_group_roles(ada, {"ml"})
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root"))
    identities = client.get("/admin/sso/identity/").content.decode()
    assert "sub-ada" in identities
    mapped = client.get("/admin/sso/mappedmembership/").content.decode()
    assert "ada" in mapped and "developer" in mapped
