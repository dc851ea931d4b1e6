"""Who signs an EAS API request: an access key pair (controlplane.eas_api.models), checked
by its ACS3-HMAC-SHA256 signature (controlplane.eas_api.signature). The key acts as its user
with the user's role in the key's workspace (request.auth.workspace, which
controlplane.workspaces.access reads as it reads an API token's)."""

from __future__ import annotations

from django.core.cache import cache
from django.utils import timezone
from rest_framework import authentication

from controlplane.eas_api import signature
from controlplane.eas_api.errors import EasError
from controlplane.eas_api.models import AccessKey
from controlplane.services.sealing import UnsealError

NONCE_SECONDS = int(signature.MAX_SKEW.total_seconds() * 2)  # a signature's whole life


def _refuse(exc: signature.SignatureRefusedError) -> EasError:
    return EasError(exc.code, exc.message, exc.status)


class AccessKeySignature(authentication.BaseAuthentication):
    def authenticate(self, request):
        headers = {name.lower(): value for name, value in request.headers.items()}
        try:
            credential = signature.parse_authorization(headers.get("authorization"))
            signature.check_date(headers.get("x-acs-date"), timezone.now())
            payload_hash = signature.check_body(headers, request._request.body)
        except signature.SignatureRefusedError as exc:
            raise _refuse(exc) from None
        key = (
            AccessKey.objects.active().select_related("user", "workspace")
            .filter(key_id=credential.key_id).first()
        )  # fmt: skip
        if key is None:
            raise EasError(
                "InvalidAccessKeyId.NotFound",
                f"Specified access key {credential.key_id!r} is not found or was revoked.",
                404,
            )
        try:
            secret = key.secret()
        except UnsealError as exc:
            raise EasError("InvalidAccessKeyId.Inactive", str(exc), 403) from None
        canonical = signature.canonical_request(
            request.method, request._request.path, _query(request), headers,
            credential.signed_headers, payload_hash,
        )  # fmt: skip
        try:
            signature.check_signature(credential, secret, canonical)
        except signature.SignatureRefusedError as exc:
            raise _refuse(exc) from None
        self._once(headers.get("x-acs-signature-nonce"), key)
        AccessKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
        return key.user, key

    @staticmethod
    def _once(nonce: str | None, key: AccessKey) -> None:
        """A signed nonce is honoured once (within this process's cache: a replay to another
        API process is caught by the date's window only)."""
        if nonce and not cache.add(f"wharf:eas-nonce:{key.key_id}:{nonce}", 1, NONCE_SECONDS):
            raise EasError("SignatureNonceUsed", "this x-acs-signature-nonce was used already")

    def authenticate_header(self, request) -> str:
        return signature.ALGORITHM


def _query(request) -> list[tuple[str, str]]:
    return [(name, value) for name, values in request.query_params.lists() for value in values]
