"""The limits' rules without I/O: what a request asks (Demand), the verdict codes the script and
the in-process fallback share, and how a verdict is told to the caller (OpenAI's 429 message
and its x-ratelimit-* and retry-after headers)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gateway.observe import metrics

# Verdict codes shared by the script and LocalLimits.
ADMITTED, OVER_RPS, OVER_RPM, OVER_TPM, TOO_LARGE, OVER_CONCURRENCY, QUEUE_FULL = range(7)
OVER_SERVICE_CONCURRENCY = 7
LIMITS_DOWN = 8  # Redis unreachable and WHARF_LIMITS_ON_REDIS_DOWN=closed: never from the script

# What a gateway does with limited calls while Redis is unreachable (WHARF_LIMITS_ON_REDIS_DOWN):
# count them in this process (each gateway enforcing every limit on its own), admit them
# uncounted, or refuse them (503) until Redis is back. Calls no limit applies to are served.
ON_DOWN_LOCAL, ON_DOWN_OPEN, ON_DOWN_CLOSED = "local", "open", "closed"
ON_DOWN = (ON_DOWN_LOCAL, ON_DOWN_OPEN, ON_DOWN_CLOSED)
RETRY_WHILE_DOWN_MS = 5000

# The limits' Redis keys, in the order the script and LocalLimits read them (0-based): the
# service's requests/s log, the key's requests and tokens per minute (a log, and the amounts
# beside it), the key's leases, the service's leases; then, from FIRST_INSTANCE, one lease set
# per candidate instance (its outstanding requests), and with worker slots one more per
# instance (the requests it works on), in the same order.
SERVICE_RPS, KEY_RPM, KEY_TPM, KEY_TPM_AMOUNTS, KEY_LEASES, SERVICE_LEASES = range(6)
FIRST_INSTANCE = 6

# EAS's default metadata.rpc.max_queue_size: requests waiting per instance once a
# worker_threads cap makes them wait.
EAS_QUEUE_SIZE = 64

REASONS = {
    OVER_RPS: metrics.REASON_SERVICE_RPS,
    OVER_RPM: metrics.REASON_KEY_RPM,
    OVER_TPM: metrics.REASON_KEY_TPM,
    TOO_LARGE: metrics.REASON_KEY_TPM,
    OVER_CONCURRENCY: metrics.REASON_KEY_CONCURRENCY,
    QUEUE_FULL: metrics.REASON_INSTANCE_QUEUE,
    OVER_SERVICE_CONCURRENCY: metrics.REASON_SERVICE_CONCURRENCY,
    LIMITS_DOWN: metrics.REASON_LIMITS_DOWN,
}

# The OpenAI SDKs honour retry-after up to 120 s; longer waits would make them give up.
_MAX_RETRY_MS = 120_000


@dataclass(frozen=True)
class Demand:
    """What one request asks of the limits; a limit of 0 is no limit."""

    service: str
    rate_limit: int = 0
    key_id: str | None = None
    rpm: int = 0
    tpm: int = 0
    max_concurrency: int = 0
    tokens: int = 0  # estimated prompt tokens + max_tokens
    instances: tuple[str, ...] = ()  # candidate instance urls, best first
    queue_size: int = 0  # outstanding requests per instance, working and waiting
    adapter: str = ""  # the LoRA adapter called: rpm and tpm count per adapter
    service_concurrency: int = 0  # the service's requests in the gateways at once
    workers: int = 0  # requests one instance works on at once; with queue_size only

    @property
    def tenant_limited(self) -> bool:
        """Whether a tenant's limit applies to it (an instance's queue is capacity, not one)."""
        return bool(self.rate_limit or self.rpm or self.tpm or self.max_concurrency
                    or self.service_concurrency)  # fmt: skip

    def unlimited(self) -> Demand:
        """The same call with no tenant's limit: what open admits while Redis is down."""
        return replace(self, rate_limit=0, rpm=0, tpm=0, max_concurrency=0, service_concurrency=0)

    @property
    def limited(self) -> bool:
        return bool(
            self.rate_limit > 0
            or self.rpm
            or self.tpm
            or self.max_concurrency
            or self.service_concurrency
            or (self.queue_size and self.instances)
        )

    @property
    def waiting(self) -> int:
        """Requests that may wait in the gateway for a worker slot, per instance."""
        return self.queue_size - self.workers if self.workers else 0


def instance_bounds(worker_threads: int | None, max_queue_size: int | None) -> tuple[int, int]:
    """(workers, queue_size) of a Demand for a service's rpc settings (0: no bound).

    Without worker_threads the engine queues for itself, and max_queue_size bounds the
    requests outstanding at an instance. With it, an instance works on worker_threads at
    once and max_queue_size more (EAS's 64 unset) wait for a slot: EAS's processors' queue.
    """
    if not worker_threads:
        return 0, max_queue_size or 0
    return worker_threads, worker_threads + (max_queue_size or EAS_QUEUE_SIZE)


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused, in the words and headers of an OpenAI 429."""

    reason: str  # metric label
    error_type: str
    message: str
    headers: dict[str, str]
    retryable: bool = True
    status: int = 429


@dataclass(frozen=True)
class Verdict:
    code: int
    retry_ms: int = 0
    rpm_left: int = -1
    rpm_reset_ms: int = 0
    tpm_left: int = -1
    tpm_reset_ms: int = 0
    chosen: int = 0  # 1-based index into the candidate instances
    working: int = 0  # 1: a worker slot at the chosen instance was taken; 0: it waits for one

    @classmethod
    def parse(cls, raw: Sequence[int]) -> Verdict:
        return cls(*(int(v) for v in raw))


def ms(seconds: float) -> int:
    return max(0, math.ceil(seconds * 1000))


def limit_headers(demand: Demand, verdict: Verdict) -> list[tuple[bytes, bytes]]:
    """OpenAI's x-ratelimit-* headers for the key's per-minute limits."""
    headers: list[tuple[bytes, bytes]] = []
    if demand.rpm and verdict.rpm_left >= 0:
        headers += [
            (b"x-ratelimit-limit-requests", str(demand.rpm).encode()),
            (b"x-ratelimit-remaining-requests", str(verdict.rpm_left).encode()),
            (b"x-ratelimit-reset-requests", duration(verdict.rpm_reset_ms).encode()),
        ]
    if demand.tpm and verdict.tpm_left >= 0:
        headers += [
            (b"x-ratelimit-limit-tokens", str(demand.tpm).encode()),
            (b"x-ratelimit-remaining-tokens", str(max(verdict.tpm_left, 0)).encode()),
            (b"x-ratelimit-reset-tokens", duration(verdict.tpm_reset_ms).encode()),
        ]
    return headers


def duration(ms: int) -> str:
    """A reset time as OpenAI writes it: "20ms", "1.5s", "6m0s"."""
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:g}s"
    minutes, rest = divmod(ms, 60_000)
    return f"{minutes}m{rest // 1000}s"


def _retry_headers(retry_ms: int) -> dict[str, str]:
    wait = min(max(retry_ms, 1), _MAX_RETRY_MS)
    # retry-after-ms is what the OpenAI SDKs read first; retry-after is for everyone else.
    return {"retry-after": str(math.ceil(wait / 1000)), "retry-after-ms": str(wait)}


def refusal(demand: Demand, verdict: Verdict) -> Refusal:
    code, wait = verdict.code, verdict.retry_ms
    # A request larger than the whole budget never fits: no retry hint for it.
    headers = {} if code == TOO_LARGE else _retry_headers(wait)
    headers.update((k.decode(), v.decode()) for k, v in _refused_limit_headers(demand, verdict))
    after = f"Retry in {max(wait, 1) / 1000:.3g} s."
    key = f"API key '{demand.key_id}'"
    if code == OVER_RPS:
        message = (
            f"Service '{demand.service}' rate limit of {demand.rate_limit} requests per second "
            f"reached. {after}"
        )
        return Refusal(REASONS[code], "requests", message, headers)
    if code == OVER_RPM:
        message = f"{key}: requests per minute limit of {demand.rpm} reached. {after}"
        return Refusal(REASONS[code], "requests", message, headers)
    if code == OVER_TPM:
        message = (
            f"{key}: tokens per minute limit of {demand.tpm} reached: this request needs about "
            f"{demand.tokens} tokens (prompt estimate + max_tokens) and "
            f"{max(verdict.tpm_left, 0)} are left. {after}"
        )
        return Refusal(REASONS[code], "tokens", message, headers)
    if code == TOO_LARGE:
        message = (
            f"Request too large for {key}: it needs about {demand.tokens} tokens (prompt "
            f"estimate + max_tokens) but the tokens per minute limit is {demand.tpm}. "
            "Lower max_tokens or shorten the prompt."
        )
        return Refusal(REASONS[code], "tokens", message, headers, retryable=False)
    if code == LIMITS_DOWN:
        message = (
            f"Service '{demand.service}''s limits cannot be checked now: the gateways' Redis "
            f"is unreachable and this gateway refuses limited calls until it is back "
            f"(WHARF_LIMITS_ON_REDIS_DOWN=closed). {after}"
        )
        return Refusal(REASONS[code], "requests", message, headers, status=503)
    if code == OVER_CONCURRENCY:
        message = (
            f"{key}: concurrent requests limit of {demand.max_concurrency} reached. Retry when "
            "one of its requests has finished."
        )
        return Refusal(REASONS[code], "requests", message, headers)
    if code == OVER_SERVICE_CONCURRENCY:
        message = (
            f"Service '{demand.service}' concurrency limit of {demand.service_concurrency} "
            "requests at once reached (networking.gateway_policy.concurrency_limit). Retry "
            "when one of its requests has finished."
        )
        return Refusal(REASONS[code], "requests", message, headers)
    if demand.workers:
        message = (
            f"Service '{demand.service}' is at capacity: every instance is working on its "
            f"{demand.workers} requests (metadata.rpc.worker_threads) and has {demand.waiting} "
            f"waiting (metadata.rpc.max_queue_size). {after}"
        )
    else:
        message = (
            f"Service '{demand.service}' is at capacity: every instance has its queue limit of "
            f"{demand.queue_size} outstanding requests. {after}"
        )
    return Refusal(REASONS[code], "requests", message, headers)


def _refused_limit_headers(demand: Demand, verdict: Verdict) -> list[tuple[bytes, bytes]]:
    if verdict.code == OVER_RPM:
        return limit_headers(demand, Verdict(ADMITTED, 0, 0, verdict.rpm_reset_ms))
    if verdict.code in (OVER_TPM, TOO_LARGE):
        return limit_headers(
            Demand(demand.service, tpm=demand.tpm),
            Verdict(ADMITTED, 0, -1, 0, max(verdict.tpm_left, 0), verdict.tpm_reset_ms),
        )
    return []
