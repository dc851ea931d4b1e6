"""One gateway in its own process, for tests that need several sharing one Redis.

    python serve_gateway.py PORT SETTINGS_JSON

SETTINGS_JSON holds gateway.config.Settings' fields (the secret key as text). Served like
`python -m gateway`: uvicorn with uvloop and httptools.
"""

from __future__ import annotations

import json
import sys

import uvicorn

from gateway.app import create_app
from gateway.config import Settings


def main() -> None:
    port, fields = int(sys.argv[1]), json.loads(sys.argv[2])
    fields["secret_key"] = fields["secret_key"].encode()
    uvicorn.run(
        create_app(Settings(**fields)),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        loop="uvloop",
        http="httptools",
        timeout_graceful_shutdown=1,
    )


if __name__ == "__main__":
    main()
