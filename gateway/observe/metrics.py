"""Prometheus metrics of one gateway process, served at GET /metrics.

Each app gets its own registry (not prometheus_client's global one), so several gateways in
one process (the tests) do not collide. With `--workers N` every worker counts alone and a
scrape reaches one of them: run one worker per gateway container and scale containers, which
is also how the limits and the balancer are meant to scale.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

# Proxy overhead is sub-millisecond and generations run for minutes: both ends matter.
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

# Why a request was refused before reaching an engine (label `reason`).
REASON_SERVICE_RPS = "service_rps"
REASON_KEY_RPM = "key_rpm"
REASON_KEY_TPM = "key_tpm"
REASON_KEY_CONCURRENCY = "key_concurrency"
REASON_SERVICE_CONCURRENCY = "service_concurrency"  # networking.gateway_policy
REASON_INSTANCE_QUEUE = "instance_queue"
REASON_LIMITS_DOWN = "limits_unavailable"  # Redis down, WHARF_LIMITS_ON_REDIS_DOWN=closed
REASON_KEY_EXPIRED = "key_expired"
REASON_KEY_SCOPE = "key_scope"
REASON_INVALID_TOKEN = "invalid_token"
REASON_ACTIVATION_QUEUE = "activation_queue"  # too many held for a service scaled to zero

# How an instance failed (label `kind`).
UPSTREAM_CONNECT = "connect"
UPSTREAM_TIMEOUT = "timeout"
UPSTREAM_BROKEN = "broken"
UPSTREAM_5XX = "http_5xx"
UPSTREAM_TOO_LARGE = "too_large"  # an answer past what the gateway holds (gateway.config)


class Metrics:
    def __init__(self) -> None:
        self._answered: dict[tuple[str, int, str], tuple[Counter, Histogram]] = {}
        self._first_byte: dict[tuple[str, str], Histogram] = {}
        self._tokens: dict[tuple[str, str], tuple[Counter, Counter]] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "wharf_gateway_requests",
            "Requests answered, by service, HTTP status (the gateway's or the engine's) and LoRA "
            "adapter (empty for the base model).",
            ["service", "status", "adapter"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "wharf_gateway_request_duration_seconds",
            "Time from the request's arrival to the end of its answer.",
            ["service"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.first_byte = Histogram(
            "wharf_gateway_time_to_first_byte_seconds",
            "Time from the request's arrival to the engine's first body bytes (first token), by "
            "service and LoRA adapter.",
            ["service", "adapter"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.tokens = Counter(
            "wharf_gateway_tokens",
            "Tokens counted for usage, by service, kind (prompt or completion) and LoRA adapter.",
            ["service", "kind", "adapter"],
            registry=self.registry,
        )
        self.rejections = Counter(
            "wharf_gateway_rejections",
            "Requests refused before reaching an engine, by reason (limits and API keys).",
            ["service", "reason"],
            registry=self.registry,
        )
        self.mirror_copies = Counter(
            "wharf_gateway_mirror_copies",
            "Copies of a mirrored service's calls (EAS's ServiceMirror), by target and outcome: "
            "the answer's status class (2xx, 4xx, 5xx) or why none was sent (no_target, "
            "not_ready, busy: the gateway's copies in flight at their cap, pd).",
            ["service", "target", "outcome"],
            registry=self.registry,
        )
        self.upstream_errors = Counter(
            "wharf_gateway_upstream_errors",
            "Engine instances failing a request: connect, timeout, broken (cut off early), "
            "http_5xx (answered with a server error, passed on as is) or too_large (an event "
            "or a prefill answer past the gateway's cap).",
            ["service", "kind"],
            registry=self.registry,
        )
        self.held = Gauge(
            "wharf_gateway_held_requests",
            "Requests held for a service scaled to zero, waiting for an instance to start.",
            ["service"],
            registry=self.registry,
        )
        self.activations = Counter(
            "wharf_gateway_activations",
            "Held requests released by an instance of their service becoming ready.",
            ["service"],
            registry=self.registry,
        )
        self.activation_timeouts = Counter(
            "wharf_gateway_activation_timeouts",
            "Held requests answered 503 because no instance became ready in time.",
            ["service"],
            registry=self.registry,
        )
        self.redis_up = Gauge(
            "wharf_gateway_redis_up",
            "1 while Redis answers; 0 means routing is the last snapshot and limits count "
            "per process.",
            registry=self.registry,
        )
        self.snapshot_age = Gauge(
            "wharf_gateway_snapshot_age_seconds",
            "Seconds since the routing snapshot was last read from Redis.",
            registry=self.registry,
        )
        self.usage_unflushed_age = Gauge(
            "wharf_gateway_usage_unflushed_age_seconds",
            "Seconds the oldest token usage count not yet written to Redis has waited (0: all "
            "written); it grows while the usage flush falls behind.",
            registry=self.registry,
        )
        self.queue_items = Counter(
            "wharf_gateway_queue_items",
            "Async services' items this gateway fed to instances, by outcome: answered (its "
            "answer, whatever its status, went to the sink), given_back (its instance failed; "
            "it goes again or fails at max_delivery) or dropped (its lease had lapsed: another "
            "gateway's delivery counts).",
            ["service", "outcome"],
            registry=self.registry,
        )
        self.queue_latency = Histogram(
            "wharf_gateway_queue_item_seconds",
            "Time from an item's put to its answer, for the items this gateway answered.",
            ["service"],
            buckets=(*_LATENCY_BUCKETS, 1800.0, 3600.0, 14400.0),
            registry=self.registry,
        )
        self.snapshot_version = Gauge(
            "wharf_gateway_snapshot_version",
            "Version of the routing snapshot being served.",
            registry=self.registry,
        )

    def watch(
        self, redis_up: Callable[[], bool], age: Callable[[], float], version: Callable[[], int]
    ) -> None:
        """Gauges computed at scrape time from the components that know them."""
        self.redis_up.set_function(lambda: 1.0 if redis_up() else 0.0)
        self.snapshot_age.set_function(age)
        self.snapshot_version.set_function(lambda: float(version()))

    def watch_usage(self, unflushed_age: Callable[[], float]) -> None:
        self.usage_unflushed_age.set_function(unflushed_age)

    def answered(self, service: str, status: int, seconds: float, adapter: str = "") -> None:
        """A request ended: its status and duration (label children cached: hot path)."""
        children = self._answered.get((service, status, adapter))
        if children is None:
            children = (
                self.requests.labels(service, str(status), adapter),
                self.latency.labels(service),
            )
            self._answered[(service, status, adapter)] = children
        children[0].inc()
        children[1].observe(seconds)

    def first_byte_after(self, service: str, seconds: float, adapter: str = "") -> None:
        child = self._first_byte.get((service, adapter))
        if child is None:
            child = self._first_byte[(service, adapter)] = self.first_byte.labels(service, adapter)
        child.observe(seconds)

    def counted(self, service: str, prompt: int, completion: int, adapter: str = "") -> None:
        children = self._tokens.get((service, adapter))
        if children is None:
            children = self._tokens[(service, adapter)] = (
                self.tokens.labels(service, "prompt", adapter),
                self.tokens.labels(service, "completion", adapter),
            )
        children[0].inc(prompt)
        children[1].inc(completion)

    def mirrored(self, service: str, target: str, status: int) -> None:
        self.mirror_copies.labels(service, target, f"{status // 100}xx").inc()

    def mirror_skipped(self, service: str, target: str, reason: str) -> None:
        self.mirror_copies.labels(service, target, reason).inc()

    def reject(self, service: str, reason: str, status: int) -> None:
        self.rejections.labels(service, reason).inc()
        self.requests.labels(service, str(status), "").inc()

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
