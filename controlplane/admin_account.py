"""The `admin` account that `manage.py up` (the README's `make run`) signs people in with.

Django counts an empty password field as a usable password (`is_password_usable("")` is true),
so an account created without one would look "set" while no password signs in. An account
here always ends with a real password: WHARF_ADMIN_PASSWORD when given, else one generated and
shown once.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from django.contrib.auth import get_user_model

USERNAME = "admin"


@dataclass(frozen=True)
class AdminPassword:
    """What the start-up summary says about the console password."""

    generated: str | None  # a new password, shown this once
    source: str  # "generated", "environment" or "kept"


def has_password(user) -> bool:
    return bool(user.password) and user.has_usable_password()


def ensure_admin(password_from_env: str):
    """The admin superuser with a password that signs in, and what to tell the user about it.

    WHARF_ADMIN_PASSWORD, when set, is the password on every run (an operator who sets it
    expects it to work); otherwise a password is generated only when the account has none.
    """
    user_model = get_user_model()
    admin = user_model.objects.filter(username=USERNAME).first()
    if admin is None:
        admin = user_model(username=USERNAME, is_staff=True, is_superuser=True)
    if password_from_env:
        if not (has_password(admin) and admin.check_password(password_from_env)):
            admin.set_password(password_from_env)
        admin.save()
        return admin, AdminPassword(None, "environment")
    if has_password(admin):
        return admin, AdminPassword(None, "kept")
    password = secrets.token_urlsafe(12)
    admin.set_password(password)
    admin.save()
    return admin, AdminPassword(password, "generated")
