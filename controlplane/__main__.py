"""`python -m controlplane --host 127.0.0.1 --port 8000`: serve the REST API and the console
with uvicorn (controlplane.asgi).

HTTPS when WHARF_TLS_CERT and WHARF_TLS_KEY name a certificate and its key (PEM files), the
files read again at the first handshake after they change (contracts.serving_tls); the
settings then turn on HSTS and Secure cookies. `uvicorn controlplane.asgi:application` still
serves plain HTTP as before; this entry point is the one that can also serve HTTPS.
"""

from __future__ import annotations

import argparse

import uvicorn

from contracts.serving_tls import TlsConfigError, serving_tls


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m controlplane", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1, help="processes")
    parser.add_argument(
        "--forwarded-allow-ips",
        default=None,
        help="addresses of proxies whose X-Forwarded-* headers are trusted "
        "(uvicorn's option; default: its own, 127.0.0.1)",
    )
    parser.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="a line per request from uvicorn (django.request logs 4xx and 5xx answers)",
    )
    args = parser.parse_args(argv)
    try:
        tls = serving_tls()
    except TlsConfigError as error:
        parser.error(str(error))
    uvicorn.run(
        "controlplane.asgi:application",
        host=args.host,
        port=args.port,
        workers=args.workers,
        forwarded_allow_ips=args.forwarded_allow_ips,
        access_log=args.access_log,
        ssl_context_factory=tls,
    )


if __name__ == "__main__":
    main()
