"""The `admin` account of `make run`: always a password that signs in, never an empty field
that Django would count as usable."""

from __future__ import annotations

import pytest
from django.contrib.auth import authenticate, get_user_model

from controlplane.admin_account import USERNAME, ensure_admin

pytestmark = pytest.mark.django_db


def signs_in(password: str) -> bool:
    return authenticate(username=USERNAME, password=password) is not None


def test_a_fresh_database_gets_an_admin_with_a_generated_password_that_signs_in():
    admin, password = ensure_admin("")
    assert admin.is_superuser and admin.is_staff
    assert password.source == "generated" and len(password.generated) >= 16
    assert signs_in(password.generated)


def test_a_later_run_keeps_the_password_and_shows_none():
    _, first = ensure_admin("")
    _, later = ensure_admin("")
    assert later.source == "kept" and later.generated is None
    assert signs_in(first.generated)


def test_an_admin_left_with_an_empty_password_field_gets_a_real_one():
    """What earlier versions left behind: get_or_create with no password at all."""
    get_user_model().objects.create(username=USERNAME, is_staff=True, is_superuser=True)
    _, password = ensure_admin("")
    assert password.source == "generated"
    assert signs_in(password.generated)


def test_an_admin_with_an_unusable_password_gets_a_real_one():
    user = get_user_model()(username=USERNAME, is_staff=True, is_superuser=True)
    user.set_unusable_password()
    user.save()
    _, password = ensure_admin("")
    assert signs_in(password.generated)


def test_the_password_from_the_environment_signs_in_and_is_not_echoed():
    _, password = ensure_admin("correct horse battery")
    assert password.source == "environment" and password.generated is None
    assert signs_in("correct horse battery")


def test_a_changed_password_in_the_environment_replaces_the_old_one():
    ensure_admin("first-password")
    ensure_admin("second-password")
    assert signs_in("second-password")
    assert not signs_in("first-password")
