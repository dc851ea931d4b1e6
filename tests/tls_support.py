"""Real certificates for the TLS tests, made with `cryptography`: a certificate authority and
server certificates it signs for 127.0.0.1 and localhost, written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Authority:
    cert: Path  # the CA bundle a client verifies with
    key: ec.EllipticCurvePrivateKey
    name: x509.Name


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def authority(folder: Path, common_name: str = "Wharf test CA") -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = folder / f"{common_name.replace(' ', '-')}.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Authority(path, key, name)


def server_pair(ca: Authority, cert: Path, key: Path, common_name: str) -> None:
    """Write a server certificate for 127.0.0.1 and localhost, signed by `ca`, and its key.

    Each file is written beside and renamed over, as a certificate manager replaces them."""
    private = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    leaf = (
        _builder(subject, ca.name, private.public_key())
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    for path, write in (
        (key, lambda p: _write_key(private, p)),
        (cert, lambda p: p.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))),
    ):
        part = path.with_name(path.name + ".new")
        write(part)
        os.replace(part, path)


def self_signed(folder: Path, common_name: str = "wharf-test") -> tuple[Path, Path]:
    """A certificate and key for 127.0.0.1 (signed by a CA of its own, in `folder`)."""
    cert, key = folder / "server.crt", folder / "server.key"
    server_pair(authority(folder), cert, key, common_name)
    return cert, key
