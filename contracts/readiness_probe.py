"""`python -m contracts.readiness_probe PORT [--wait SECONDS]`: exit 0 once this host's API or
gateway on PORT answers 200 on /readyz, over HTTPS when WHARF_TLS_CERT is set (the server
then serves only HTTPS), plain HTTP otherwise. For compose's health checks and systemd's
ExecStartPost, which cannot tell which scheme the server speaks.

The certificate is not verified: the probe calls 127.0.0.1, a name the certificate (made for
the public name) need not carry, and asks only whether the server is ready, not who it is.
"""

from __future__ import annotations

import argparse
import ssl
import sys
import time
import urllib.error
import urllib.request

from contracts.env import envstr


def readyz_url(port: int, tls: bool) -> str:
    return f"{'https' if tls else 'http'}://127.0.0.1:{port}/readyz"


def unverified() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def answers_ready(url: str, timeout: float = 3) -> bool:
    context = unverified() if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contracts.readiness_probe")
    parser.add_argument("port", type=int)
    parser.add_argument("--wait", type=float, default=0, help="seconds to keep trying")
    args = parser.parse_args(argv)
    url = readyz_url(args.port, bool(envstr("WHARF_TLS_CERT").strip()))
    deadline = time.monotonic() + args.wait
    while not answers_ready(url):
        if time.monotonic() >= deadline:
            print(f"{url} did not answer 200", file=sys.stderr)
            return 1
        time.sleep(2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
