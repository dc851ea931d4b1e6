"""HTTPS for the API/console and the gateway: a certificate and key given as files
(WHARF_TLS_CERT, WHARF_TLS_KEY), served again without a restart when the files change.

uvicorn builds its server's ssl.SSLContext through `ssl_context_factory`; `ServingTls` is that
factory. The context it returns carries an SNI callback, which OpenSSL calls at every handshake
(with or without a server name from the client): it compares the files' signatures (inode,
size, mtime) with those of the certificate in use and, when they differ, builds a new context
from them and hands that handshake, and every later one, to it. Connections already open keep
the certificate they began with. A pair that does not load (the certificate written and the key
not yet, a key that does not match) is logged once and the last good pair stays served; the
next handshake after the files change again tries again. Nothing here imports either plane.
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.env import envstr

log = logging.getLogger("wharf.tls")

CERT_VARIABLE = "WHARF_TLS_CERT"
KEY_VARIABLE = "WHARF_TLS_KEY"

FileSignature = tuple[int, int, int] | None
Signature = tuple[FileSignature, ...]


class TlsConfigError(ValueError):
    """WHARF_TLS_CERT / WHARF_TLS_KEY given wrong: the message names the variable."""


def file_signature(path: Path) -> FileSignature:
    """What changes when a file is replaced or rewritten (None while it is missing)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def server_context(cert: Path, key: Path, alpn: list[str] | None = None) -> ssl.SSLContext:
    """A server context for this pair: TLS 1.2 at least, Python's default ciphers."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    if alpn:
        context.set_alpn_protocols(alpn)
    return context


@dataclass(frozen=True)
class ServingTls:
    """The certificate and key files a server serves; a uvicorn `ssl_context_factory`.

    Only paths: it is pickled to each of uvicorn's worker processes, which build their own
    context (and their own reloading) from it.
    """

    cert: Path
    key: Path

    def __call__(self, config: Any, default_factory: Any = None) -> ssl.SSLContext:
        alpn = getattr(getattr(config, "http_protocol_class", None), "alpn_protocols", None)
        return ReloadingCertificate(self.cert, self.key, alpn).context


def serving_tls(
    environ: dict[str, str] | None = None,
    *,
    cert_variable: str = CERT_VARIABLE,
    key_variable: str = KEY_VARIABLE,
) -> ServingTls | None:
    """HTTPS from WHARF_TLS_CERT and WHARF_TLS_KEY (or the two variables named), None (plain
    HTTP) when neither is set.

    Both or neither; each must name a readable file. The pair itself is loaded once here so
    that a wrong one stops the start with a message, rather than failing every handshake.
    """
    cert, key = (
        (envstr(name) if environ is None else environ.get(name, "")).strip()
        for name in (cert_variable, key_variable)
    )
    if not cert and not key:
        return None
    if not (cert and key):
        missing = key_variable if cert else cert_variable
        raise TlsConfigError(
            f"{cert_variable} and {key_variable} go together: set {missing} too (a PEM file), "
            "or neither for plain HTTP"
        )
    for name, value in ((cert_variable, cert), (key_variable, key)):
        if not os.access(value, os.R_OK):
            raise TlsConfigError(f"{name}={value}: no readable file there")
    try:
        server_context(Path(cert), Path(key))
    except (ssl.SSLError, OSError) as error:
        raise TlsConfigError(
            f"{cert_variable}={cert} and {key_variable}={key} do not load as a certificate "
            f"chain and its private key (PEM): {error}"
        ) from error
    return ServingTls(Path(cert), Path(key))


class ReloadingCertificate:
    """The context a server listens with; its handshakes use the files' current pair."""

    def __init__(self, cert: Path, key: Path, alpn: list[str] | None = None) -> None:
        self.cert, self.key, self.alpn = cert, key, alpn
        self.signature = self._signature()
        self.context = server_context(cert, key, alpn)
        self.context.sni_callback = self._on_handshake
        self.current = self.context
        self.failed: Signature | None = None  # a pair that did not load, logged once

    def _signature(self) -> Signature:
        return file_signature(self.cert), file_signature(self.key)

    def refresh(self) -> ssl.SSLContext:
        """The context for a new handshake: a new one if the files changed and they load."""
        signature = self._signature()
        if signature == self.signature or signature == self.failed:
            return self.current
        try:
            fresh = server_context(self.cert, self.key, self.alpn)
        except (ssl.SSLError, OSError) as error:
            self.failed = signature
            log.warning(
                "the certificate %s and key %s changed but do not load (%s); still serving "
                "the previous pair",
                self.cert,
                self.key,
                error,
            )
            return self.current
        self.signature, self.current, self.failed = signature, fresh, None
        log.info("serving the certificate %s, reloaded from disk", self.cert)
        return fresh

    def _on_handshake(self, connection: Any, server_name: str | None, context: Any) -> None:
        current = self.refresh()
        if current is not self.context:
            connection.context = current
