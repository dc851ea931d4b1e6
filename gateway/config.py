"""Gateway settings, read once from the environment through contracts.env."""

from __future__ import annotations

from dataclasses import dataclass

from contracts import env
from contracts.routing import SNAPSHOT_CHANNEL, SNAPSHOT_KEY


class ConfigError(RuntimeError):
    """A setting is missing or unusable; the message says which variable to set."""


@dataclass(frozen=True)
class Settings:
    redis_url: str
    secret_key: bytes
    snapshot_poll: float = 5.0
    upstream_timeout: float = 600.0
    # Fixed by the contract in production; tests pass unique names so that runs sharing one
    # Redis (and its database-agnostic pub/sub) cannot see each other's snapshots.
    snapshot_key: str = SNAPSHOT_KEY
    snapshot_channel: str = SNAPSHOT_CHANNEL


def load_settings() -> Settings:
    secret = env.secret("WHARF_SECRET_KEY")
    if not secret:
        raise ConfigError(
            "WHARF_SECRET_KEY (or WHARF_SECRET_KEY_FILE) must be set to the control plane's "
            "secret key; the gateway needs it to check service tokens."
        )
    poll = env.envfloat("WHARF_GATEWAY_SNAPSHOT_POLL", 5.0)
    timeout = env.envfloat("WHARF_GATEWAY_UPSTREAM_TIMEOUT", 600.0)
    if poll <= 0 or timeout <= 0:
        raise ConfigError(
            "WHARF_GATEWAY_SNAPSHOT_POLL and WHARF_GATEWAY_UPSTREAM_TIMEOUT must be positive "
            "numbers of seconds."
        )
    return Settings(
        redis_url=env.envstr("REDIS_URL", "redis://127.0.0.1:6379/0"),
        secret_key=secret.encode(),
        snapshot_poll=poll,
        upstream_timeout=timeout,
    )
