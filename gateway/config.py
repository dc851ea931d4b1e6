"""Gateway settings, read once from the environment through contracts.env."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from contracts import env
from contracts.call_figures import PREFIX as FIGURES_PREFIX
from contracts.routing import SNAPSHOT_CHANNEL, SNAPSHOT_KEY
from contracts.usage import USAGE_PREFIX
from gateway.limits.rules import ON_DOWN, ON_DOWN_LOCAL

# A request body is held whole before it is forwarded (and a generation call's parsed), so
# larger ones are refused with 413: four times a 1M-token prompt, room for inline images.
MAX_BODY_BYTES = 16 * 1024 * 1024
# What the gateway holds of an engine's answer (gateway.relay.taps, gateway.routing.prefill): past
# these the one request ends, so no engine can grow the gateway's memory or its work per byte.
# One streamed event is a token or a few (an echoed long prompt a few hundred KiB); a prefill
# leg's answer is one token and the connector's transfer parameters.
MAX_SSE_EVENT_BYTES = 1024 * 1024
JSON_TAP_BYTES = 1024 * 1024
MAX_PREFILL_ANSWER_BYTES = 4 * 1024 * 1024


# WHARF_HOME's default, as the control plane's settings have it: .wharf in the checkout.
DEFAULT_HOME = Path(__file__).resolve().parents[1] / ".wharf"
UPSTREAM_KEEPALIVE_S = 4.0
# Scale from zero (gateway.routing.activation): requests held per service while its first instance
# starts, and for how long. A vLLM engine loading a 7B model takes a minute or two, a
# larger one several: five minutes covers most without holding a caller forever.
ACTIVATION_QUEUE = 64
ACTIVATION_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class AnswerCaps:
    """How much of one engine answer the gateway holds, in bytes (the settings' caps)."""

    sse_event: int = MAX_SSE_EVENT_BYTES
    json_copy: int = JSON_TAP_BYTES
    prefill_answer: int = MAX_PREFILL_ANSWER_BYTES


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
    # Where limit counters and usage counts live (gateway.limits.admission, contracts.usage); tests
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
    # An engine's streamed event that grows past this without ending cuts its stream.
    max_sse_event_bytes: int = MAX_SSE_EVENT_BYTES
    # The head of a JSON answer kept to read its usage; past it, only a tail is kept.
    json_tap_bytes: int = JSON_TAP_BYTES
    # A prefill leg's answer larger than this fails the prefill leg.
    max_prefill_answer_bytes: int = MAX_PREFILL_ANSWER_BYTES
    # GET /metrics: the bearer token a scraper sends ("" : closed on the main port), and an
    # address ("host:port") where a listener serves the metrics alone, without a token.
    metrics_token: str = ""
    metrics_listen: str = ""

    @property
    def answer_caps(self) -> AnswerCaps:
        return AnswerCaps(
            self.max_sse_event_bytes, self.json_tap_bytes, self.max_prefill_answer_bytes
        )

    # Idle connections to engines are closed after this long (0: one request per connection).
    # Below the engines' own idle timeout (uvicorn's, vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE: 5 s)
    # the gateway closes first; at or above it, a request can meet a connection the engine
    # closes as it arrives, which gateway.relay.upstream then sends again where that is safe.
    upstream_keepalive: float = UPSTREAM_KEEPALIVE_S
    # Requests held per service scaled to zero (unless its max_queue_size says), and the
    # longest any is held (never past the service's keepalive).
    activation_queue: int = ACTIVATION_QUEUE
    activation_timeout: float = ACTIVATION_TIMEOUT_S
    # How often the engines' load figures are read for kv_cache_load (they are scraped every
    # 2 s).
    engine_figures_interval: float = 1.0
    # Where each call's figures (errors, TTFT, inter-token latency) go (contracts.call_figures).
    figures_prefix: str = FIGURES_PREFIX
    # The control plane's API, where Async services' queues are stored (gateway.queues).
    api_url: str = "http://127.0.0.1:8000"
    # How long an Async service's item stays with this gateway's instance without renewal: a
    # gateway that dies gives its items back to the others after this (renewed every third).
    queue_lease: float = 30.0
    # Limited calls while Redis is unreachable: counted per process, admitted, or refused.
    limits_on_redis_down: str = ON_DOWN_LOCAL
    # Batch requests an instance of a Standard service without worker_threads works on at
    # once (WHARF_BATCH_WINDOW, read by the API too, which bounds it across gateways).
    batch_window: int = 4
    # An OTLP/HTTP collector's base address for the gateway's traces ("": no traces).
    otlp_endpoint: str = ""
    # Where services that ask for a request log have it written (gateway.observe.request_log).
    request_log_dir: str = str(DEFAULT_HOME / "request_logs")


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
    answer_caps = _answer_caps()
    return Settings(
        redis_url=env.envstr("REDIS_URL", "redis://127.0.0.1:6379/0"),
        secret_key=secret.encode(),
        snapshot_poll=poll,
        upstream_timeout=timeout,
        max_body_bytes=max_body,
        upstream_keepalive=keepalive,
        activation_queue=queue,
        activation_timeout=activation,
        max_sse_event_bytes=answer_caps[0],
        json_tap_bytes=answer_caps[1],
        max_prefill_answer_bytes=answer_caps[2],
        metrics_token=env.secret("WHARF_GATEWAY_METRICS_TOKEN"),
        metrics_listen=_metrics_listen(),
        api_url=_api_url(),
        queue_lease=_queue_lease(),
        limits_on_redis_down=_limits_on_redis_down(),
        batch_window=_batch_window(),
        otlp_endpoint=otlp_endpoint(),
        request_log_dir=env.envstr("WHARF_GATEWAY_REQUEST_LOG_DIR")
        or str(Path(env.envstr("WHARF_HOME") or DEFAULT_HOME) / "request_logs"),
    )


def otlp_endpoint() -> str:
    """WHARF_OTLP_ENDPOINT, else OpenTelemetry's own OTEL_EXPORTER_OTLP_ENDPOINT: an http(s)
    collector address for traces over OTLP/HTTP; "" (the default) turns traces off."""
    url = (env.envstr("WHARF_OTLP_ENDPOINT") or env.envstr("OTEL_EXPORTER_OTLP_ENDPOINT")).strip()
    if url and not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"WHARF_OTLP_ENDPOINT must be an OTLP/HTTP collector's http:// or https:// "
            f"address (http://collector:4318), not {url!r}."
        )
    return url


def _batch_window() -> int:
    window = env.envint("WHARF_BATCH_WINDOW", 4)
    if not 1 <= window <= 10_000:
        raise ConfigError("WHARF_BATCH_WINDOW must be a number of requests from 1 to 10000.")
    return window


def _limits_on_redis_down() -> str:
    mode = env.envstr("WHARF_LIMITS_ON_REDIS_DOWN", ON_DOWN_LOCAL).strip().lower()
    if mode not in ON_DOWN:
        raise ConfigError(
            "WHARF_LIMITS_ON_REDIS_DOWN must be local (each gateway counts the limits on its "
            "own), open (limited calls admitted uncounted) or closed (refused with 503) — "
            f"not {mode!r}."
        )
    return mode


def _queue_lease() -> float:
    lease = env.envfloat("WHARF_GATEWAY_QUEUE_LEASE", 30.0)
    if not 1 <= lease <= 3600:
        raise ConfigError(
            "WHARF_GATEWAY_QUEUE_LEASE must be a number of seconds from 1 to 3600 (how long "
            "an Async service's item waits for a gateway that stopped before another takes it)."
        )
    return lease


def _api_url() -> str:
    """WHARF_API_URL: the control plane's API, an http(s) URL."""
    url = env.envstr("WHARF_API_URL", "http://127.0.0.1:8000").strip()
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"WHARF_API_URL must be an http:// or https:// URL, not {url!r}.")
    return url


def _answer_caps() -> tuple[int, int, int]:
    """(SSE event, JSON tap, prefill answer) byte caps, each a positive number of bytes."""
    caps = (
        ("WHARF_GATEWAY_MAX_SSE_EVENT_BYTES", MAX_SSE_EVENT_BYTES),
        ("WHARF_GATEWAY_JSON_TAP_BYTES", JSON_TAP_BYTES),
        ("WHARF_GATEWAY_MAX_PREFILL_ANSWER_BYTES", MAX_PREFILL_ANSWER_BYTES),
    )
    values = tuple(env.envint(name, default) for name, default in caps)
    for (name, _), value in zip(caps, values, strict=True):
        if value <= 0:
            raise ConfigError(f"{name} must be a positive number of bytes.")
    return values[0], values[1], values[2]


def _metrics_listen() -> str:
    """WHARF_GATEWAY_METRICS_LISTEN as given, once it is known to be a usable host:port."""
    value = env.envstr("WHARF_GATEWAY_METRICS_LISTEN").strip()
    if value and listen_address(value) is None:
        raise ConfigError(
            f"WHARF_GATEWAY_METRICS_LISTEN must be host:port (127.0.0.1:9091, [::1]:9091, "
            f"0.0.0.0:9091), not {value!r}."
        )
    return value


def listen_address(value: str) -> tuple[str, int] | None:
    """("host", port) from "host:port" ("[v6]:port" for IPv6), or None if it is not one."""
    host, colon, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port.isdecimal() or not 0 < int(port) < 65536:
        return None
    return host, int(port)
