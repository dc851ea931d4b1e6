"""EAS's signed calls (contracts.eas_signature): which token signed one, if any.

The tokens that may sign are the snapshot's sealed ones (contracts.token_sealing), opened
here, in memory, when a snapshot loads, and never written anywhere: a call names no token,
so its signature is checked against each token that may call its service (the service's own,
then each API key that reaches it). That is one HMAC-SHA1 of a few hundred bytes per
candidate, about a microsecond: thousands of keys in one workspace stay well under a
millisecond. The signing token's digest then goes through the same checks as a token
presented in clear (gateway.callers.authorize): expiry, scope, limits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from cryptography.fernet import Fernet
from starlette.requests import Request
from starlette.responses import JSONResponse

from contracts.eas_signature import SignedCall, body_matches, date_problem, signature_of, signed_by
from contracts.routing import Snapshot
from contracts.token_sealing import open_token, sealing_key
from contracts.tokens import token_digest
from gateway import errors
from gateway.observe import metrics
from gateway.observe.metrics import Metrics

log = logging.getLogger(__name__)


class SigningTokens:
    """The tokens of the current snapshot that may sign calls, opened, with their digests."""

    def __init__(self, secret_key: bytes) -> None:
        self._secret_key = secret_key
        self._key: Fernet = sealing_key(secret_key)
        self._opened: dict[str, tuple[bytes, str]] = {}  # sealed -> (token, digest)
        self._services: dict[str, tuple[tuple[bytes, str], ...]] = {}
        self._keys: tuple[tuple[bytes, str], ...] = ()

    def load(self, snapshot: Snapshot) -> None:
        """Open the snapshot's sealed tokens (those opened before are kept, not reopened)."""
        opened: dict[str, tuple[bytes, str]] = {}
        unopened = 0
        sealed = {s for svc in snapshot.services.values() for s in svc.sealed_tokens}
        sealed |= {key.sealed_token for key in snapshot.keys.values() if key.sealed_token}
        for value in sealed:
            found = self._opened.get(value) or self._open(value)
            if found is None:
                unopened += 1
            else:
                opened[value] = found
        if unopened:  # how many, never which: a sealed value is still a secret's envelope
            log.warning(
                "%d sealed tokens in routing snapshot %d do not open with this gateway's "
                "WHARF_TOKEN_KEY (is it the control plane's?); their signed calls get 401",
                unopened, snapshot.version,
            )  # fmt: skip
        self._opened = opened
        self._services = {
            name: tuple(opened[s] for s in sorted(svc.sealed_tokens) if s in opened)
            for name, svc in snapshot.services.items()
        }
        self._keys = tuple(
            opened[key.sealed_token] for key in snapshot.keys.values() if key.sealed_token in opened
        )

    def _open(self, sealed: str) -> tuple[bytes, str] | None:
        token = open_token(self._key, sealed)
        if token is None:
            return None
        return token, token_digest(self._secret_key, token.decode())

    def signer(
        self, snapshot: Snapshot, service: str, call: SignedCall, owners: Iterable[str] = ()
    ) -> str | None:
        """The digest of the token that signed `call` to `service` (a service, or a group
        whose members are `owners`), if any may have."""
        for owner in sorted(owners) or (service,):
            for token, digest in self._services.get(owner, ()):
                if signed_by(token, call):
                    return digest
        for token, digest in self._keys:
            key = snapshot.keys.get(digest)
            if key is not None and key.reaches(service) and signed_by(token, call):
                return digest
        return None


def signed_call(request: Request) -> SignedCall | None:
    """The call's signature and what it covers, when it is signed (`Authorization: EAS …`)."""
    signature = signature_of(request.headers.get("authorization"))
    if signature is None:
        return None
    headers = request.headers
    raw_path: bytes | None = request.scope.get("raw_path")
    path = raw_path.decode("latin-1") if raw_path is not None else request.url.path
    return SignedCall(
        signature=signature,
        method=request.method,
        content_md5=headers.get("content-md5", ""),
        content_type=headers.get("content-type", ""),
        date=headers.get("date", ""),
        path=path.partition("?")[0],
    )


def verify(
    signing: SigningTokens,
    snapshot: Snapshot,
    service: str,
    call: SignedCall,
    counters: Metrics,
    owners: Iterable[str] = (),
) -> str | JSONResponse:
    """The signing token's digest, or EAS's 401 saying why the call is refused."""
    problem = date_problem(call.date, time.time())
    if problem is not None:
        message = f"The signed call is refused: {problem}."
        return _refused(counters, service, "invalid_date", message)
    if not call.content_md5:
        return _refused(counters, service, "missing_content_md5", "The signed call is refused: "
                        "it has no Content-MD5 header (the MD5 of its body, hex).")  # fmt: skip
    digest = signing.signer(snapshot, service, call, owners)
    if digest is None:
        return _refused(
            counters,
            service,
            "invalid_signature",
            f"The call's signature is no token's of service '{service}'. Sign "
            "'<method>\\n<Content-MD5>\\n<Content-Type>\\n<Date>\\n<path>' with HMAC-SHA1 keyed "
            "with the token, as EAS's SDKs do, or send the token itself as Authorization.",
        )
    return digest


def check_body(
    call: SignedCall, body: bytes, service: str, counters: Metrics
) -> JSONResponse | None:
    """EAS's 401 when the body read is not the one the signed Content-MD5 names."""
    if body_matches(call.content_md5, body):
        return None
    return _refused(
        counters,
        service,
        "content_md5_mismatch",
        "The signed call is refused: its body does not match its Content-MD5 (the MD5 of the "
        "body, hex); the body was changed after it was signed.",
    )


def _refused(counters: Metrics, service: str, code: str, message: str) -> JSONResponse:
    counters.reject(service, metrics.REASON_INVALID_TOKEN, 401)
    return errors.error_response(401, errors.INVALID_REQUEST, code, message,
                                 headers={"WWW-Authenticate": "EAS"})  # fmt: skip
