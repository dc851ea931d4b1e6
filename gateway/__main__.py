"""`python -m gateway --host 127.0.0.1 --port 9000`: serve the gateway with uvicorn."""

from __future__ import annotations

import argparse
import copy
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG


def log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging, extended to the gateway's own loggers (applied in every worker)."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["gateway"] = {
        "handlers": ["default"],
        "level": level.upper(),
        "propagate": False,
    }
    return config


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
    parser.add_argument("--log-level", default="info")
    parser.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="log every request (off by default: at hundreds of requests a second the log "
        "line is a noticeable share of a request's cost; /metrics counts them instead)",
    )
    args = parser.parse_args(argv)
    uvicorn.run(
        "gateway.app:app",
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        log_config=log_config(args.log_level),
        access_log=args.access_log,
        # The fast event loop and HTTP parser (uvicorn[standard]); the gateway's overhead
        # per request roughly halves against asyncio's loop and h11.
        loop="uvloop",
        http="httptools",
        # Streams can be long; a graceful stop should not cut them instantly, nor wait forever.
        timeout_graceful_shutdown=30,
        server_header=False,
    )


if __name__ == "__main__":
    main()
