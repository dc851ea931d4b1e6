"""The identity provider's endpoints, read from its discovery document
(ISSUER/.well-known/openid-configuration, OpenID Connect Discovery 1.0) when someone signs in,
and kept for an hour in the process. Never at start-up: a provider that is down must not stop
Wharf, only single sign-on."""

from __future__ import annotations

import time

import httpx
from django.conf import settings
from mozilla_django_oidc.utils import import_from_settings

# mozilla-django-oidc's setting -> the discovery document's field.
ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
KEPT_S = 3600.0
_kept: dict[str, tuple[float, dict]] = {}


class DiscoveryError(Exception):
    """The provider's discovery document could not be read or is not usable."""


def provider_metadata(issuer: str) -> dict:
    """The discovery document of `issuer`, checked: it names the same issuer and every
    endpoint sign-in uses."""
    kept = _kept.get(issuer)
    if kept and time.monotonic() - kept[0] < KEPT_S:
        return kept[1]
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = httpx.get(url, timeout=10)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise DiscoveryError(f"{url}: {exc}") from None
    if not isinstance(document, dict) or document.get("issuer", "").rstrip("/") != issuer:
        raise DiscoveryError(f"{url} names another issuer; check WHARF_OIDC_ISSUER")
    missing = [field for field in ENDPOINTS.values() if not document.get(field)]
    if missing:
        raise DiscoveryError(f"{url} gives no {', '.join(missing)}")
    _kept[issuer] = (time.monotonic(), document)
    return document


def forget() -> None:
    """Drop the kept documents (a provider that moved; tests)."""
    _kept.clear()


def oidc_setting(attr: str, *default):
    """mozilla-django-oidc's settings, its OIDC_OP_* endpoints from the discovery document."""
    if attr in ENDPOINTS:
        return provider_metadata(settings.WHARF_OIDC_ISSUER)[ENDPOINTS[attr]]
    return import_from_settings(attr, *default)
