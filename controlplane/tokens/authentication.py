from __future__ import annotations

from rest_framework import authentication, exceptions

from contracts.tokens import bearer_token
from controlplane.tokens.models import ApiToken, digest, note_use


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <api token>`; the token is looked up by its HMAC digest."""

    def authenticate(self, request):
        token = bearer_token(request.headers.get("Authorization"))
        if token is None:
            return None
        api_token = (
            ApiToken.objects.select_related("user", "workspace")
            .filter(digest=digest(token))
            .first()
        )
        if api_token is None or not api_token.user.is_active:
            raise exceptions.AuthenticationFailed("invalid API token")
        note_use(api_token)
        return api_token.user, api_token

    def authenticate_header(self, request) -> str:
        return "Bearer"
