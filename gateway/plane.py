"""What forwarding a request works with: the process's parts (Plane) and one authorized
request (Call), shared by the proxy (gateway.relay.proxy) and the prefill leg
(gateway.routing.prefill)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from contracts.routing import RoutedInstance, RoutedService
from gateway.config import AnswerCaps
from gateway.engine_auth import EngineKeys
from gateway.limits.admission import Demand, Limiter
from gateway.observe import metrics
from gateway.observe.figures import FiguresRecorder
from gateway.observe.metrics import Metrics
from gateway.observe.request_log import RequestLog
from gateway.observe.tracing import Tracing
from gateway.observe.usage import UsageRecorder
from gateway.relay.upstream import Upstream
from gateway.routing.balancer import Balancer
from gateway.routing.pd import PrefillLeg
from gateway.routing.policies import RoutingKey

log = logging.getLogger(__name__)

OPENAI_FORM, EAS_FORM = "openai", "eas"


@dataclass(frozen=True)
class Plane:
    """The per-process parts every forwarded request uses."""

    upstream: Upstream
    balancer: Balancer
    limiter: Limiter
    usage: UsageRecorder
    metrics: Metrics
    engine_keys: EngineKeys
    caps: AnswerCaps = field(default_factory=AnswerCaps)  # what one answer may make it hold
    figures: FiguresRecorder | None = None  # each call's errors, TTFT and inter-token latency
    tracing: Tracing | None = None  # OpenTelemetry traces (gateway.observe.tracing); None: off
    request_log: RequestLog | None = None  # services' request logs (gateway.observe.request_log)

    def instance_failed(
        self, service: str, instance: RoutedInstance, kind: str, why: BaseException | str
    ) -> None:
        """An instance that cannot be reached or stopped answering sits out its cool-down;
        one that broke off a request, or answered more than the gateway holds, does not (the
        request, not the instance, may be at fault)."""
        log.warning("instance %s (%s) failed (%s): %r", instance.name, instance.url, kind, why)
        self.metrics.upstream_errors.labels(service, kind).inc()
        if kind not in (metrics.UPSTREAM_BROKEN, metrics.UPSTREAM_TOO_LARGE):
            self.balancer.cool_down(instance.url)


@dataclass(frozen=True)
class Call:
    """One authorized request, ready to forward."""

    service: RoutedService
    key_id: str  # contracts.usage.SERVICE_TOKEN_ID for a service token
    demand: Demand
    method: str
    path: str
    query: bytes
    headers: list[tuple[str, str]]
    body: bytes
    timeout: float
    prompt_estimate: int  # tokens, from the body's size
    strip_usage: bool = False  # the gateway asked for the stream's usage event, not the client
    arrived: float = 0.0  # time.perf_counter() when the request came in
    policy: str = "least_outstanding"  # how instances are ranked (gateway.routing.policies)
    routing_key: RoutingKey | None = None  # the prompt and session, for the policies needing them
    prefill: PrefillLeg | None = None  # a prefill/decode service: prefill first, then decode
    form: str = OPENAI_FORM  # how the caller called: OpenAI's routes or EAS's /api/predict/...
    keepalive: float | None = None  # seconds for the whole request (metadata.rpc.keepalive)
    adapter: str = ""  # the LoRA adapter called ("" for the base model)
    track: str = ""  # "canary": a canary release's instances took it (gateway.routing.canary)

    @property
    def target(self) -> str:
        """The path and query the engine is called on."""
        path = self.path if self.path.startswith("/") else "/" + self.path
        return f"{path}?{self.query.decode('latin-1')}" if self.query else path
