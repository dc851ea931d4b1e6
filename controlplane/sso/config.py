"""Whether the sign-in settings make sense together, checked at start-up (pure)."""

from __future__ import annotations


def sign_in_problem(issuer: str, client_id: str, local_login: bool) -> str | None:
    """What is wrong with these settings, for the error that stops start-up; None: nothing."""
    if issuer and not issuer.startswith(("https://", "http://")):
        return f"WHARF_OIDC_ISSUER must be the provider's URL (https://...), not {issuer!r}"
    if issuer and not client_id:
        return "WHARF_OIDC_ISSUER is set but WHARF_OIDC_CLIENT_ID is not; give both"
    if client_id and not issuer:
        return "WHARF_OIDC_CLIENT_ID is set but WHARF_OIDC_ISSUER is not; give both"
    if not local_login and not issuer:
        return (
            "WHARF_LOCAL_LOGIN=false turns password sign-in off, but single sign-on is not "
            "configured (WHARF_OIDC_ISSUER): nobody could sign in"
        )
    return None
