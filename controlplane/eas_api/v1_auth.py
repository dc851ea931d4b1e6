"""The v1 API signed with an access key pair: eascmd configured with `-i AccessKeyId -k
AccessKeySecret` signs each request so (wharfcli.acs_auth). Only a request that carries a
signature is this class's; it is refused as the v1 API refuses (401), the EAS code in the
words. A module of its own: DRF imports its authentication classes while its views load,
before the EAS API's (which import them) can."""

from __future__ import annotations

from rest_framework import authentication, exceptions

SCHEMES = ("acs ", "ACS3-HMAC-SHA256")  # controlplane.eas_api.signature_roa and .signature


class AccessKeyOnV1(authentication.BaseAuthentication):
    def authenticate(self, request):
        if not request.headers.get("Authorization", "").startswith(SCHEMES):
            return None  # a token's, or none: the other authentications'
        from controlplane.eas_api.authentication import AccessKeySignature
        from controlplane.eas_api.errors import EasError

        try:
            return AccessKeySignature().authenticate(request)
        except EasError as exc:
            raise exceptions.AuthenticationFailed(f"{exc.eas_code}: {exc.message}") from None

    def authenticate_header(self, request) -> str:
        return "Bearer"  # what a caller without credentials is told to bring (a 401, not 403)
