"""TLS between Wharf and the engines' fronts on the nodes, so that an instance's engine key
(contracts.engine_keys, sent in each connection's first request) never crosses the network
in clear.

- A node given WHARF_ENGINE_TLS_CERT and WHARF_ENGINE_TLS_KEY (its own certificate, naming
  its WHARF_NODE_ADDRESS, and key; PEM files) starts every engine front it runs serving TLS
  with them (gateway.front, reloaded when the files change: contracts.serving_tls), and
  reports its instances' URLs as https://.
- The gateways and the workers verify those certificates against WHARF_ENGINE_TLS_CA (a CA
  bundle; unset: the system's CAs) on every call to an https:// instance: the gateway's own
  client (gateway.relay.upstream), its web-app relay and WebSockets, and the workers' readiness
  checks, warm-up, adapter loading and metrics scrapes.
"""

from __future__ import annotations

import ssl
from functools import lru_cache

from contracts.env import envstr
from contracts.serving_tls import ServingTls, serving_tls

CERT_ENV = "WHARF_ENGINE_TLS_CERT"
KEY_ENV = "WHARF_ENGINE_TLS_KEY"
CA_ENV = "WHARF_ENGINE_TLS_CA"


def node_tls(environ: dict[str, str] | None = None) -> ServingTls | None:
    """This node's fronts' certificate and key; None: its fronts speak plain HTTP."""
    return serving_tls(environ, cert_variable=CERT_ENV, key_variable=KEY_ENV)


def instance_url(address: str, port: int, tls: bool) -> str:
    return f"{'https' if tls else 'http'}://{address}:{port}"


@lru_cache(maxsize=1)
def client_context() -> ssl.SSLContext:
    """What every call to an https:// instance verifies its front's certificate with (the
    hostname too: the node's address must be in the certificate)."""
    return ssl.create_default_context(cafile=envstr(CA_ENV).strip() or None)
