"""HTTPS from WHARF_TLS_CERT and WHARF_TLS_KEY (contracts.serving_tls): what the variables
accept, and a certificate replaced on disk served from the next handshake on, the last good
pair kept while the files do not load. Real certificates, real TLS handshakes in memory."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from contracts.serving_tls import (
    ReloadingCertificate,
    ServingTls,
    TlsConfigError,
    file_signature,
    serving_tls,
)
from tests.tls_support import Authority, authority, server_pair


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    return authority(tmp_path)


@pytest.fixture
def pair(tmp_path: Path, ca: Authority) -> tuple[Path, Path]:
    cert, key = tmp_path / "wharf.crt", tmp_path / "wharf.key"
    server_pair(ca, cert, key, "first")
    return cert, key


def served_name(server: ssl.SSLContext, ca: Authority) -> str:
    """The common name of the certificate `server` presents in a handshake (in memory)."""
    client = ssl.create_default_context(cafile=ca.cert)
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_end = client.wrap_bio(to_client, to_server, server_hostname="127.0.0.1")
    server_end = server.wrap_bio(to_server, to_client, server_side=True)
    pending = [client_end, server_end]
    for _ in range(10):
        for end in list(pending):
            try:
                end.do_handshake()
                pending.remove(end)
            except ssl.SSLWantReadError:
                pass
    assert not pending
    subject = dict(item[0] for item in client_end.getpeercert()["subject"])
    return subject["commonName"]


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"WHARF_TLS_CERT": "CERT"}, "set WHARF_TLS_KEY too"),
        ({"WHARF_TLS_KEY": "KEY"}, "set WHARF_TLS_CERT too"),
        ({"WHARF_TLS_CERT": "/nowhere.crt", "WHARF_TLS_KEY": "KEY"}, "WHARF_TLS_CERT=/nowhere"),
        ({"WHARF_TLS_CERT": "CERT", "WHARF_TLS_KEY": "/nowhere.key"}, "WHARF_TLS_KEY=/nowhere"),
        ({"WHARF_TLS_CERT": "KEY", "WHARF_TLS_KEY": "KEY"}, "do not load as a certificate"),
        ({"WHARF_TLS_CERT": "CERT", "WHARF_TLS_KEY": "CERT"}, "do not load as a certificate"),
    ],
)
def test_refuses_tls_variables_that_cannot_serve(pair, given, named):
    cert, key = pair
    environ = {name: value.replace("CERT", str(cert)).replace("KEY", str(key))
               for name, value in given.items()}  # fmt: skip
    with pytest.raises(TlsConfigError, match=named):
        serving_tls(environ)


def test_serves_plain_http_without_tls_variables():
    assert serving_tls({}) is None
    assert serving_tls({"WHARF_TLS_CERT": " ", "WHARF_TLS_KEY": ""}) is None


def test_a_given_pair_becomes_the_servers_context(pair, ca):
    cert, key = pair
    tls = serving_tls({"WHARF_TLS_CERT": str(cert), "WHARF_TLS_KEY": str(key)})
    assert tls == ServingTls(cert, key)
    assert served_name(tls(config=None), ca) == "first"


def test_a_replaced_certificate_is_served_from_the_next_handshake(pair, ca):
    cert, key = pair
    server = ReloadingCertificate(cert, key)
    assert served_name(server.context, ca) == "first"
    server_pair(ca, cert, key, "second")
    assert served_name(server.context, ca) == "second"
    assert served_name(server.context, ca) == "second"  # loaded once, kept


def test_keeps_the_last_good_pair_while_the_files_do_not_load(pair, ca, tmp_path):
    cert, key = pair
    server = ReloadingCertificate(cert, key)
    other_cert, other_key = tmp_path / "other.crt", tmp_path / "other.key"
    server_pair(ca, other_cert, other_key, "other")
    cert.write_bytes(other_cert.read_bytes())  # the certificate written, its key not yet
    assert served_name(server.context, ca) == "first"
    key.write_bytes(other_key.read_bytes())
    assert served_name(server.context, ca) == "other"


def test_a_file_signature_changes_when_the_file_is_replaced(tmp_path):
    path = tmp_path / "f"
    assert file_signature(path) is None
    path.write_text("a")
    first = file_signature(path)
    (tmp_path / "g").write_text("a")
    (tmp_path / "g").replace(path)
    assert file_signature(path) != first
