"""Gateway settings, read once from the environment through contracts.env."""

from __future__ import annotations

from dataclasses import dataclass

from contracts import env
from contracts.routing import SNAPSHOT_CHANNEL, SNAPSHOT_KEY
from contracts.usage import USAGE_PREFIX

# A request body is held whole before it is forwarded (and a generation call's parsed), so
# larger ones are refused with 413: four times a 1M-token prompt, room for inline images.
MAX_BODY_BYTES = 16 * 1024 * 1024


UPSTREAM_KEEPALIVE_S = 4.0
# Scale from zero (gateway.activation): requests held per service while its first instance
# starts, and for how long. A vLLM engine loading a 7B model takes a minute or two, a
# larger one several: five minutes covers most without holding a caller forever.
ACTIVATION_QUEUE = 64
ACTIVATION_TIMEOUT_S = 300.0


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
    # Where limit counters and usage counts live (gateway.limits, contracts.usage); tests
    # give each run its own so that nothing else sharing the Redis touches them.
    limits_prefix: str = "wharf:limit:"
    usage_prefix: str = USAGE_PREFIX
    # The limits' windows: a "second" for service rate limits, a "minute" for an API key's
    # rpm and tpm. Only tests shorten them.
    second_s: float = 1.0
    minute_s: float = 60.0
    # A concurrency or queue slot held by a gateway that died frees itself after this long;
    # live gateways renew theirs every third of it.
    lease_ttl: float = 60.0
    # How long an instance that refused a connection or timed out is passed over.
    cooldown: float = 5.0
    usage_flush_interval: float = 1.0
    max_body_bytes: int = MAX_BODY_BYTES
    # Idle connections to engines are closed after this long (0: one request per connection).
    # Below the engines' own idle timeout (uvicorn's, vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE: 5 s)
    # the gateway closes first; at or above it, a request can meet a connection the engine
    # closes as it arrives, which gateway.upstream then sends again where that is safe.
    upstream_keepalive: float = UPSTREAM_KEEPALIVE_S
    # Requests held per service scaled to zero (unless its max_queue_size says), and the
    # longest any is held (never past the service's keepalive).
    activation_queue: int = ACTIVATION_QUEUE
    activation_timeout: float = ACTIVATION_TIMEOUT_S
    # How often the engines' load figures are read for kv_cache_load (they are scraped every
    # 2 s).
    engine_figures_interval: float = 1.0


def load_settings() -> Settings:
    # The control plane's token key (its digests of tokens and keys, the engines' keys); a
    # deployment that predates it gives the secret key, which was that key then.
    secret = env.secret("WHARF_TOKEN_KEY") or env.secret("WHARF_SECRET_KEY")
    if not secret:
        raise ConfigError(
            "WHARF_TOKEN_KEY (or WHARF_TOKEN_KEY_FILE) must be set to the control plane's "
            "token key; the gateway needs it to check tokens and to call engines."
        )
    poll = env.envfloat("WHARF_GATEWAY_SNAPSHOT_POLL", 5.0)
    timeout = env.envfloat("WHARF_GATEWAY_UPSTREAM_TIMEOUT", 600.0)
    if poll <= 0 or timeout <= 0:
        raise ConfigError(
            "WHARF_GATEWAY_SNAPSHOT_POLL and WHARF_GATEWAY_UPSTREAM_TIMEOUT must be positive "
            "numbers of seconds."
        )
    max_body = env.envint("WHARF_GATEWAY_MAX_BODY_BYTES", MAX_BODY_BYTES)
    if max_body <= 0:
        raise ConfigError("WHARF_GATEWAY_MAX_BODY_BYTES must be a positive number of bytes.")
    keepalive = env.envfloat("WHARF_GATEWAY_UPSTREAM_KEEPALIVE", UPSTREAM_KEEPALIVE_S)
    if not 0 <= keepalive <= 3600:
        raise ConfigError(
            "WHARF_GATEWAY_UPSTREAM_KEEPALIVE must be a number of seconds from 0 (no reuse) "
            "to 3600; keep it below the engines' idle timeout (5 s for vLLM)."
        )
    queue = env.envint("WHARF_GATEWAY_ACTIVATION_QUEUE", ACTIVATION_QUEUE)
    activation = env.envfloat("WHARF_GATEWAY_ACTIVATION_TIMEOUT", ACTIVATION_TIMEOUT_S)
    if queue < 1 or not 0 < activation <= 3600:
        raise ConfigError(
            "WHARF_GATEWAY_ACTIVATION_QUEUE must be a positive number of requests and "
            "WHARF_GATEWAY_ACTIVATION_TIMEOUT a number of seconds from 0 to 3600 (how long a "
            "request waits for a service scaled to zero to start)."
        )
    return Settings(
        redis_url=env.envstr("REDIS_URL", "redis://127.0.0.1:6379/0"),
        secret_key=secret.encode(),
        snapshot_poll=poll,
        upstream_timeout=timeout,
        max_body_bytes=max_body,
        upstream_keepalive=keepalive,
        activation_queue=queue,
        activation_timeout=activation,
    )
