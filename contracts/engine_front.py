"""An engine's front (gateway.front), as every part that starts or calls one names it: where it
listens beside its engine, the variables its secrets come in, its readiness path."""

from __future__ import annotations

KEY_ENV = "WHARF_FRONT_KEY"  # the instance's engine key (contracts.engine_keys)
METRICS_TOKEN_ENV = "WHARF_FRONT_METRICS_TOKEN"  # the operator's WHARF_ENGINE_METRICS_TOKEN
READY_PATH = "/.wharf/ready"  # 200 when the engine accepts connections, else 503
# GET ?port=P[&path=/x]&timeout=S: 200 when the instance's port P (one its spec probes)
# accepts a connection, or answers /x with 2xx/3xx; else 503 (EAS's container probes).
PROBE_PATH = "/.wharf/probe"
PORT = 18999  # where a front listens in its engine's network namespace


def front_port(engine_port: int) -> int:
    """The front's port beside an engine serving on `engine_port`: PORT, unless the engine
    has it."""
    return PORT if engine_port != PORT else PORT - 1
