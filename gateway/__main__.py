"""`python -m gateway --host 127.0.0.1 --port 9000`: serve the gateway with uvicorn.

HTTPS when WHARF_TLS_CERT and WHARF_TLS_KEY name a certificate and its key (PEM files), the
files read again at the first handshake after they change (contracts.serving_tls).

HTTP/2 with `--http2`: uvicorn's zttp protocol (`pip install zttp`, not in Wharf's runtime
set) in place of httptools, the parser the gateway's overhead was measured with. Over TLS the
client chooses by ALPN (h2 or http/1.1); in clear, HTTP/2 with prior knowledge or HTTP/1.1."""

from __future__ import annotations

import argparse
import importlib.util
import logging
from typing import Any

import uvicorn

from contracts.log_format import LEVELS, LogConfigError, log_format, log_level, logging_config
from contracts.serving_tls import TlsConfigError, serving_tls


def log_config(level: str) -> dict[str, Any]:
    """The one Wharf log format (contracts.log_format, WHARF_LOG_FORMAT) for uvicorn's loggers,
    its access log included, and the gateway's own (applied in every worker)."""
    return logging_config(log_format(), level.upper())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes: limits are shared through Redis, balancing and /metrics per process",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        help="default: WHARF_LOG_LEVEL, else INFO",
    )
    parser.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="log every request (off by default: at hundreds of requests a second the log "
        "line is a noticeable share of a request's cost; /metrics counts them instead)",
    )
    parser.add_argument(
        "--http2",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="serve HTTP/2 too, with uvicorn's zttp protocol (pip install zttp)",
    )
    args = parser.parse_args(argv)
    if args.http2 and importlib.util.find_spec("zttp") is None:
        parser.error("--http2 needs uvicorn's zttp protocol: pip install zttp (or leave it off)")
    try:
        level = args.log_level or log_level()
        config = log_config(level)
        tls = serving_tls()
    except (LogConfigError, TlsConfigError) as error:
        parser.error(str(error))
    logging.captureWarnings(True)  # Python's warnings as log lines, in the format
    uvicorn.run(
        "gateway.app:app",
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=level.lower(),
        log_config=config,
        # Lines without query strings (they may carry keys), with the request's x-request-id.
        access_log=args.access_log,
        # The fast event loop and HTTP parser (uvicorn[standard]); the gateway's overhead
        # per request roughly halves against asyncio's loop and h11. HTTP/2 only with zttp.
        loop="uvloop",
        http="zttp" if args.http2 else "httptools",
        http2=args.http2,
        # Streams can be long; a graceful stop should not cut them instantly, nor wait forever.
        timeout_graceful_shutdown=30,
        server_header=False,
        ssl_context_factory=tls,
    )


if __name__ == "__main__":
    main()
