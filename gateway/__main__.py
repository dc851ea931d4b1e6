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
    parser.add_argument("--workers", type=int, default=1, help="processes (each balances alone)")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    uvicorn.run(
        "gateway.app:app",
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        log_config=log_config(args.log_level),
        # Streams can be long; a graceful stop should not cut them instantly, nor wait forever.
        timeout_graceful_shutdown=30,
        server_header=False,
    )


if __name__ == "__main__":
    main()
