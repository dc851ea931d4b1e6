"""Single sign-on with OpenID Connect: mozilla-django-oidc's authentication backend, with the
provider's endpoints from discovery (controlplane.sso.discovery), users found by the
provider's subject (controlplane.sso.models.Identity) and made at their first sign-in, and
their workspace roles from the provider's groups at every sign-in
(controlplane.sso.memberships). It never checks a password."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from controlplane.sso.discovery import DiscoveryError, oidc_setting
from controlplane.sso.mapping import groups_in
from controlplane.sso.memberships import apply_group_roles
from controlplane.sso.models import Identity

log = logging.getLogger(__name__)

# Set from the discovery document and the settings at sign-in, as the parent's __init__ would.
_SIGN_IN_SETTINGS = {
    "OIDC_OP_TOKEN_ENDPOINT": (),
    "OIDC_OP_USER_ENDPOINT": (),
    "OIDC_OP_JWKS_ENDPOINT": (None,),
    "OIDC_RP_CLIENT_ID": (),
    "OIDC_RP_CLIENT_SECRET": (),
    "OIDC_RP_SIGN_ALGO": ("RS256",),
    "OIDC_RP_IDP_SIGN_KEY": (None,),
}
NOT_IN_USERNAMES = re.compile(r"[^\w.@+-]")


def username_for(claims: Mapping[str, object], taken: Callable[[str], bool]) -> str:
    """A new user's name: the provider's preferred_username, else the email's local part,
    else the subject, in the characters Django allows; `-2`, `-3`... when taken (by a local
    account or another provider account)."""
    for claim in ("preferred_username", "email", "sub"):
        value = claims.get(claim)
        if isinstance(value, str) and value.strip():
            if claim == "email":
                value = value.partition("@")[0]
            base = NOT_IN_USERNAMES.sub("-", value.strip())[:140]
            break
    else:
        base = "sso-user"
    name, n = base, 1
    while taken(name):
        n += 1
        name = f"{base}-{n}"
    return name


def id_token_problem(payload: Mapping[str, object], issuer: str, client_id: str) -> str | None:
    """What OpenID Connect Core 3.1.3.7 refuses in a (signed) ID token's claims that
    mozilla-django-oidc does not check: another issuer, or not meant for this client."""
    if str(payload.get("iss", "")).rstrip("/") != issuer:
        return f"the ID token's issuer {payload.get('iss')!r} is not {issuer!r}"
    audience = payload.get("aud")
    audiences = audience if isinstance(audience, list) else [audience]
    if client_id not in audiences:
        return f"the ID token is for {audience!r}, not this client {client_id!r}"
    if len(audiences) > 1 and payload.get("azp") != client_id:
        return f"the ID token names several audiences but its azp is not {client_id!r}"
    return None


class SsoBackend(OIDCAuthenticationBackend):
    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs) -> None:
        # Django makes a backend for every request of a signed-in user (get_user): the
        # provider is asked for its endpoints only when someone signs in (authenticate).
        self.UserModel = get_user_model()

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is not None or password is not None or not settings.WHARF_OIDC_ISSUER:
            return None  # a password sign-in: never this backend's
        try:
            for attr, default in _SIGN_IN_SETTINGS.items():
                setattr(self, attr, self.get_settings(attr, *default))
        except DiscoveryError as exc:
            log.warning("single sign-on unavailable: %s", exc)
            return None
        return super().authenticate(request, **kwargs)

    def verify_token(self, token, **kwargs):
        payload = super().verify_token(token, **kwargs)
        problem = id_token_problem(payload, settings.WHARF_OIDC_ISSUER, self.OIDC_RP_CLIENT_ID)
        if problem:
            raise SuspiciousOperation(problem)
        return payload

    def get_userinfo(self, access_token, id_token, payload):
        claims = super().get_userinfo(access_token, id_token, payload)
        # OpenID Connect Core 5.3.2: the UserInfo answer is about the ID token's subject.
        if claims.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("the provider's userinfo names another subject")
        return claims

    def retrieve_matching_jwk(self, token):
        if "kid" in jwt.get_unverified_header(token):
            return super().retrieve_matching_jwk(token)
        # OpenID Connect Core 10.1: a kid is required only when the provider has several
        # keys; a token without one is signed with the set's only signing key.
        answer = requests.get(self.OIDC_OP_JWKS_ENDPOINT, timeout=self.get_settings("OIDC_TIMEOUT"))
        answer.raise_for_status()
        signing = [key for key in answer.json().get("keys", []) if key.get("use", "sig") == "sig"]
        if len(signing) != 1:
            raise SuspiciousOperation("the ID token names no key (kid) among several")
        return jwt.PyJWK(signing[0])

    def verify_claims(self, claims) -> bool:
        return bool(claims.get("sub"))

    def describe_user_by_claims(self, claims) -> str:
        return f"subject {claims.get('sub')!r}"

    def filter_users_by_claims(self, claims):
        return self.UserModel.objects.filter(
            sso_identity__issuer=settings.WHARF_OIDC_ISSUER, sso_identity__subject=claims["sub"]
        )

    @transaction.atomic
    def create_user(self, claims):
        taken = self.UserModel.objects.filter
        username = username_for(claims, lambda name: taken(username__iexact=name).exists())
        user = self.UserModel.objects.create_user(username)  # no usable password
        Identity.objects.create(user=user, issuer=settings.WHARF_OIDC_ISSUER, subject=claims["sub"])
        log.info("single sign-on: user %s made for subject %r", username, claims["sub"])
        return self.update_user(user, claims)

    def update_user(self, user, claims):
        """The provider's email and names copied at each sign-in, and the workspace roles."""
        fields = {"email": "email", "first_name": "given_name", "last_name": "family_name"}
        changed = []
        for field, claim in fields.items():
            value = claims.get(claim)
            if isinstance(value, str) and getattr(user, field) != value[:150]:
                setattr(user, field, value[:150])
                changed.append(field)
        if changed:
            user.save(update_fields=changed)
        apply_group_roles(user, groups_in(claims, settings.WHARF_OIDC_GROUPS_CLAIM))
        return user
