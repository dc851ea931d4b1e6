"""OTLP/HTTP addresses, as the gateway's exporter and the engines' (vLLM's) both need them."""

from __future__ import annotations

TRACES_PATH = "/v1/traces"


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL for a collector's base address (as OTEL_EXPORTER_OTLP_ENDPOINT
    gives it): `<base>/v1/traces`, unless it already names that path."""
    base = endpoint.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH
