"""OpenTelemetry traces of the gateway's calls, exported over OTLP/HTTP; off unless configured.

One trace per forwarded call: a server span for the call (continuing the caller's
`traceparent` when it sends one) with a child span for each thing the gateway does to it —
admission (the limits), routing (ranking the instances), the prefill leg of a prefill/decode
service, and the engine call (named `decode` for such a service) — and the engine's own spans
below those (vLLM's `--otlp-traces-endpoint`, which the adapters render when the platform has
an endpoint: contracts.engines.vllm), joined by the `traceparent` header the gateway sends
with each leg. GenAI semantic-convention attributes (gen_ai.request.model, gen_ai.usage.*)
are set on the call's span.

Off (no endpoint) the proxy holds `None` instead of a Tracing and skips all of it: one
`is None` test per step (benchmarks/tracing_overhead.py measures both).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from contracts.otlp import traces_url

SERVICE_NAME = "wharf-gateway"
TRACE_HEADERS = frozenset({"traceparent", "tracestate"})
_PROPAGATOR = TraceContextTextMapPropagator()
# GenAI semantic conventions (opentelemetry.io/docs/specs/semconv/gen-ai/), by the route called.
_OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "text_completion",
    "/v1/embeddings": "embeddings",
}


def operation(path: str) -> str:
    """gen_ai.operation.name for a call on `path` (the engine's path, EAS form included)."""
    for suffix, name in _OPERATIONS.items():
        if path.endswith(suffix):
            return name
    return "other"


class ExportFailures(logging.Filter):
    """The SDK logs a whole traceback for each batch it cannot send (every 5 s while the
    collector is away): this keeps one line a minute, naming the error."""

    def __init__(self, every_s: float = 60.0) -> None:
        super().__init__()
        self.every_s = every_s
        self._last = -math.inf

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self._last < self.every_s:
            return False
        self._last = now
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.getMessage()} ({record.exc_info[1]}); traces are being lost"
            record.args = None
            record.exc_info = record.exc_text = None
        return True


_EXPORT_LOG = logging.getLogger("opentelemetry.sdk.trace.export")


class Tracing:
    """The gateway's tracer and how its trace context travels to the engines."""

    def __init__(self, exporter: SpanExporter) -> None:
        if not any(isinstance(f, ExportFailures) for f in _EXPORT_LOG.filters):
            _EXPORT_LOG.addFilter(ExportFailures())
        self.provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
        # Spans are queued and sent from the processor's own thread, in batches: a slow or
        # absent collector costs dropped spans (its queue is bounded), never a slower call.
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("wharf.gateway")

    @classmethod
    def to_endpoint(cls, endpoint: str) -> Tracing | None:
        """Tracing to the OTLP/HTTP collector at `endpoint`; None (off) for ""."""
        if not endpoint:
            return None
        return cls(OTLPSpanExporter(endpoint=traces_url(endpoint), timeout=5))

    def call_span(
        self, name: str, headers: list[tuple[str, str]], attributes: dict[str, str]
    ) -> Span:
        """The span of one call, a child of the caller's trace when its headers carry one."""
        carrier = {n.lower(): v for n, v in headers if n.lower() in TRACE_HEADERS}
        parent = _PROPAGATOR.extract(carrier)
        return self.tracer.start_span(
            name, context=parent, kind=SpanKind.SERVER, attributes=attributes
        )

    @contextmanager
    def step(self, name: str, parent: Span, kind: SpanKind = SpanKind.INTERNAL) -> Iterator[Span]:
        """A child span of the call's for one step; an exception leaves it marked an error."""
        context = trace.set_span_in_context(parent)
        with self.tracer.start_as_current_span(name, context=context, kind=kind) as span:
            yield span

    @staticmethod
    def headers_for(span: Span, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """`headers` with `span`'s trace context in place of the caller's, for an engine."""
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        kept = [(n, v) for n, v in headers if n.lower() not in TRACE_HEADERS]
        return kept + list(carrier.items())

    @staticmethod
    def finish(span: Span, status: int, counts: tuple[int, int] | None) -> None:
        """End the call's span with its status and the tokens the engine reported."""
        span.set_attribute("http.response.status_code", status)
        if counts is not None:
            span.set_attribute("gen_ai.usage.input_tokens", counts[0])
            span.set_attribute("gen_ai.usage.output_tokens", counts[1])
        if status >= 500 or status == 0:
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    @staticmethod
    def mark_instance(name: str, url: str) -> None:
        """Name the instance that answers on the current step's span (the engine call's)."""
        span = trace.get_current_span()
        span.set_attribute("wharf.instance", name)
        span.set_attribute("wharf.instance_url", url)

    def shutdown(self) -> None:
        """Send what is queued and stop (the gateway's shutdown)."""
        self.provider.shutdown()
