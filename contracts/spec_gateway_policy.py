"""What the gateway admits to a service: EAS's `networking.gateway_policy` (the service's
global requests/s and in-flight caps) and `metadata.rpc.worker_threads` (each instance's
concurrency), as spec mixins (contracts.spec_cloud.Networking, contracts.spec.Rpc), and how
they become the routing snapshot's numbers (`service_rate_limit`, `policy_limit`).

The gateway enforces them across all its processes (gateway.limits.admission):
- `gateway_policy.rate_limit` and `metadata.rpc.rate_limit` are both requests per second for
  the whole service; given both, the lower wins. (EAS means rpc.rate_limit per instance; Wharf
  has always counted it for the service, like the gateway policy's.)
- `gateway_policy.concurrency_limit`: requests in the gateway for the service at once, waiting
  for an instance included.
- `worker_threads`: requests at one instance at once; more wait in the gateway for a slot, at
  most `max_queue_size` of them per instance (EAS's 64 unset), up to the keepalive.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from contracts.spec_fleet import _Strict

WORKER_THREADS = (
    "Requests an instance works on at once (EAS's processors' worker threads, default 5 "
    "there): more wait in the gateway for a slot, at most max_queue_size per instance (64 "
    "unset), up to the keepalive; beyond it, EAS's 450. Unset: no cap, as LLM engines batch "
    "and queue requests themselves."
)
RATE = (
    "The service's requests per second, across every gateway (429 beyond). With "
    "metadata.rpc.rate_limit too, the lower wins."
)
CONCURRENCY = (
    "The service's requests in the gateway at once, across every gateway, those waiting for "
    "an instance included (429 beyond)."
)


class PolicyLimit(_Strict):
    """One limit of the gateway policy: acted on only when `enable` is true."""

    enable: bool = False
    limit: int | None = Field(default=None, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _limit_when_enabled(self) -> PolicyLimit:
        if self.enable and self.limit is None:
            raise ValueError("limit is required when enable is true")
        return self


class GatewayPolicy(_Strict):
    rate_limit: PolicyLimit | None = Field(default=None, description=RATE)
    concurrency_limit: PolicyLimit | None = Field(default=None, description=CONCURRENCY)


class GatewayPolicied(_Strict):
    """networking.gateway_policy, on the spec's networking section."""

    gateway_policy: GatewayPolicy | None = None


class RpcConcurrency(_Strict):
    """metadata.rpc.worker_threads (EAS's aliases metadata.worker_threads, metadata.workers)."""

    worker_threads: int | None = Field(default=None, ge=1, le=10_000, description=WORKER_THREADS)


def policy_limit(limit: PolicyLimit | None) -> int | None:
    """The limit's number when it is enabled, else None (no limit)."""
    if limit is None or not limit.enable:
        return None
    return limit.limit


def service_rate_limit(rpc_rate: int | None, policy: GatewayPolicy | None) -> int | None:
    """The service's requests per second: the lower of metadata.rpc.rate_limit and an enabled
    gateway_policy.rate_limit; None when neither is given."""
    policy_rate = policy_limit(policy.rate_limit) if policy else None
    given = [r for r in (rpc_rate, policy_rate) if r is not None]
    return min(given) if given else None
