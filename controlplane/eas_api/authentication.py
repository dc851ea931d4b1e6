"""Who signs an EAS API request: an access key pair (controlplane.eas_api.models), checked by
its signature -- ACS3-HMAC-SHA256 (controlplane.eas_api.signature: EAS's SDKs today) or the
older ROA `acs ID:SIGNATURE` (controlplane.eas_api.signature_roa: Terraform's provider). The
key acts as its user with the user's role in the key's workspace (request.auth.workspace,
which controlplane.workspaces.access reads as it reads an API token's)."""

from __future__ import annotations

from collections.abc import Callable

from django.core.cache import cache
from django.utils import timezone
from rest_framework import authentication

from controlplane.eas_api import signature, signature_roa
from controlplane.eas_api.errors import EasError
from controlplane.eas_api.models import AccessKey
from controlplane.services.sealing import UnsealError
from controlplane.tokens.models import note_use

NONCE_SECONDS = int(signature.MAX_SKEW.total_seconds() * 2)  # a signature's whole life

Check = Callable[[str], None]  # raises SignatureRefusedError unless the secret signed it


def _acs3(request, headers: dict[str, str]) -> tuple[str, Check]:
    credential = signature.parse_authorization(headers.get("authorization"))
    signature.check_date(headers.get("x-acs-date"), timezone.now())
    payload_hash = signature.check_body(headers, request._request.body)
    canonical = signature.canonical_request(
        request.method, request._request.path, _query(request), headers,
        credential.signed_headers, payload_hash,
    )  # fmt: skip
    return credential.key_id, lambda secret: signature.check_signature(
        credential, secret, canonical
    )


def _roa(request, headers: dict[str, str]) -> tuple[str, Check]:
    key_id, signed = signature_roa.parse_authorization(headers["authorization"])
    signature_roa.check_date(headers.get("date"), timezone.now())
    body = request._request.body
    signature_roa.check_body(headers, body)
    # A WSGI server may invent `Content-Type: text/plain` for a request that sent none
    # (wsgiref does); the signer signed an empty one then.
    sent_types = [headers.get("content-type", "")]
    if not body and sent_types[0] == "text/plain":
        sent_types.append("")
    strings = [
        signature_roa.string_to_sign(request.method, request._request.path, _query(request),
                                     {**headers, "content-type": sent_type})
        for sent_type in sent_types
    ]  # fmt: skip
    return key_id, lambda secret: signature_roa.check_any(signed, secret, strings)


class AccessKeySignature(authentication.BaseAuthentication):
    def authenticate(self, request):
        headers = {name.lower(): value for name, value in request.headers.items()}
        roa = headers.get("authorization", "").startswith(f"{signature_roa.SCHEME} ")
        try:
            key_id, check = (_roa if roa else _acs3)(request, headers)
        except signature.SignatureRefusedError as exc:
            raise EasError(exc.code, exc.message, exc.status) from None
        key = self._key(key_id)
        try:
            check(key.secret())
        except signature.SignatureRefusedError as exc:
            raise EasError(exc.code, exc.message, exc.status) from None
        except UnsealError as exc:
            raise EasError("InvalidAccessKeyId.Inactive", str(exc), 403) from None
        self._once(headers.get("x-acs-signature-nonce"), key)
        note_use(key)
        return key.user, key

    @staticmethod
    def _key(key_id: str) -> AccessKey:
        key = (
            AccessKey.objects.active().select_related("user", "workspace")
            .filter(key_id=key_id).first()
        )  # fmt: skip
        if key is None:
            raise EasError(
                "InvalidAccessKeyId.NotFound",
                f"Specified access key {key_id!r} is not found or was revoked.",
                404,
            )
        return key

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
