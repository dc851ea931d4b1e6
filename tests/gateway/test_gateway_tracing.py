"""OpenTelemetry traces through a real gateway: spans sent over OTLP/HTTP to a receiver this
module runs, each leg's `traceparent` reaching the engine that served it, and none of it when
no endpoint is configured."""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from gateway_support import Engine, Gateway, make_token, service, snapshot, unique
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from contracts.otlp import traces_url
from contracts.routing import PdRouting
from gateway import config
from gateway.observe.tracing import ExportFailures, operation

pytestmark = pytest.mark.timeout(60)

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER_PARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _value(any_value: Any) -> Any:
    return getattr(any_value, any_value.WhichOneof("value"))


@dataclass
class OtlpReceiver:
    """A small OTLP/HTTP traces receiver: what the exporter posts to /v1/traces, decoded."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    content_types: set[str] = field(default_factory=set)

    def take(self, payload: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(payload)
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(ReceivedSpan(
                        span.name, span.trace_id.hex(), span.span_id.hex(),
                        span.parent_span_id.hex(), span.kind,
                        {a.key: _value(a.value) for a in span.attributes}, resource,
                    ))  # fmt: skip

    def trace(self, trace_id: str, names: set[str], seconds: float = 10) -> dict[str, ReceivedSpan]:
        """The spans of `trace_id` by name, once every one of `names` has come."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = {s.name: s for s in list(self.spans) if s.trace_id == trace_id}
            if names <= found.keys():
                return found
            time.sleep(0.05)
        raise AssertionError(f"spans {names} of {trace_id} not received; got {self.spans}")


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[OtlpReceiver, str]]:
    received = OtlpReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            payload = self.rfile.read(int(self.headers["content-length"]))
            received.content_types.add(self.headers["content-type"])
            if self.path == "/v1/traces":
                received.take(payload)
            body = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield received, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def traced_gateway(
    start_gateway: Callable[..., Gateway],
    receiver: tuple[OtlpReceiver, str],
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., Gateway]:
    """Starts gateways that send their spans to the receiver every 50 ms (not every 5 s)."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    return lambda initial: start_gateway(initial, otlp_endpoint=receiver[1])


def _call(gateway: Gateway, token: str, model: str, test_id: str, **headers: str) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "two words"}],
              "max_tokens": 4},
        headers={"Authorization": f"Bearer {token}", "x-test-id": test_id, **headers},
        timeout=10, trust_env=False,
    )  # fmt: skip


def _parent(traceparent: str) -> tuple[str, str]:
    """(trace id, parent span id) of a W3C traceparent header."""
    version, trace_id, span_id, _ = traceparent.split("-")
    assert version == "00"
    return trace_id, span_id


def test_a_call_s_spans_join_the_caller_s_trace_and_reach_the_engine(
    traced_gateway: Callable[..., Gateway],
    receiver: tuple[OtlpReceiver, str],
    engines: list[Engine],
) -> None:
    received, _ = receiver
    token, digest = make_token()
    svc = service(unique("traced"), [engines[0].instance], [digest], models=("traced-model",))
    gateway = traced_gateway(snapshot(1, svc))
    test_id = uuid.uuid4().hex
    answer = _call(gateway, token, "traced-model", test_id, traceparent=CALLER_PARENT)
    assert answer.status_code == 200
    usage = answer.json()["usage"]
    spans = received.trace(
        CALLER_TRACE, {"POST /v1/chat/completions", "routing", "admission", "engine"}
    )
    call = spans["POST /v1/chat/completions"]
    assert call.parent_id == CALLER_SPAN  # the caller's trace continues
    assert call.kind == 2  # SPAN_KIND_SERVER
    for step in ("routing", "admission", "engine"):
        assert spans[step].parent_id == call.span_id
    assert spans["engine"].kind == 3  # SPAN_KIND_CLIENT
    assert spans["engine"].attributes["wharf.instance"] == engines[0].name
    assert spans["engine"].attributes["wharf.instance_url"] == engines[0].url
    assert call.attributes["gen_ai.request.model"] == svc.name
    assert call.attributes["gen_ai.operation.name"] == "chat"
    assert call.attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert call.attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"] == 4
    assert call.attributes["http.response.status_code"] == 200
    assert call.resource["service.name"] == "wharf-gateway"
    assert received.content_types == {"application/x-protobuf"}
    # The engine got the engine span's context, so its own spans hang under it.
    seen = engines[0].recorder.seen[test_id].headers["traceparent"]
    assert _parent(seen) == (CALLER_TRACE, spans["engine"].span_id)


def test_prefill_and_decode_legs_each_carry_their_own_span(
    traced_gateway: Callable[..., Gateway],
    receiver: tuple[OtlpReceiver, str],
    engines: list[Engine],
) -> None:
    received, _ = receiver
    token, digest = make_token()
    prefill = replace(engines[0].instance, role="prefill")
    decode = replace(engines[1].instance, role="decode")
    svc = service(unique("traced-pd"), [prefill, decode], [digest], models=("pd-model",))
    gateway = traced_gateway(snapshot(1, replace(svc, pd=PdRouting("ExampleConnector"))))
    test_id = uuid.uuid4().hex
    assert _call(gateway, token, "pd-model", test_id).status_code == 200
    prefill_seen = engines[0].recorder.seen[test_id].headers["traceparent"]
    trace_id, _ = _parent(prefill_seen)
    assert trace_id != CALLER_TRACE  # no caller trace: the gateway starts one
    spans = received.trace(trace_id, {"POST /v1/chat/completions", "prefill", "decode"})
    assert "engine" not in spans
    assert _parent(prefill_seen)[1] == spans["prefill"].span_id
    decode_seen = engines[1].recorder.seen[test_id].headers["traceparent"]
    assert _parent(decode_seen) == (trace_id, spans["decode"].span_id)
    call = spans["POST /v1/chat/completions"]
    assert call.parent_id == ""  # a root span
    assert spans["prefill"].parent_id == spans["decode"].parent_id == call.span_id


def test_a_refused_call_s_span_says_why(
    traced_gateway: Callable[..., Gateway],
    receiver: tuple[OtlpReceiver, str],
    engines: list[Engine],
) -> None:
    received, _ = receiver
    token, digest = make_token()
    svc = service(unique("refusing"), [engines[0].instance], [digest], models=("refusing",),
                  rate_limit=1)  # fmt: skip
    gateway = traced_gateway(snapshot(1, svc))
    trace_ids = [uuid.uuid4().hex for _ in range(3)]
    statuses = [
        _call(gateway, token, "refusing", uuid.uuid4().hex,
              traceparent=f"00-{trace_id}-{CALLER_SPAN}-01").status_code
        for trace_id in trace_ids
    ]  # fmt: skip
    assert statuses[0] == 200 and 429 in statuses
    refused = trace_ids[statuses.index(429)]
    spans = received.trace(refused, {"POST /v1/chat/completions", "admission"})
    call = spans["POST /v1/chat/completions"]
    assert call.attributes["http.response.status_code"] == 429
    assert call.attributes["wharf.refused"]
    assert "engine" not in spans


def test_without_an_endpoint_nothing_is_traced_and_the_caller_s_context_passes(
    start_gateway: Callable[..., Gateway], engines: list[Engine]
) -> None:
    token, digest = make_token()
    svc = service(unique("untraced"), [engines[0].instance], [digest], models=("plain",))
    gateway = start_gateway(snapshot(1, svc))
    assert gateway.settings.otlp_endpoint == ""
    test_id = uuid.uuid4().hex
    assert _call(gateway, token, "plain", test_id, traceparent=CALLER_PARENT).status_code == 200
    assert engines[0].recorder.seen[test_id].headers["traceparent"] == CALLER_PARENT
    assert gateway.app.state.runtime.plane.tracing is None


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("http://collector:4318", "http://collector:4318/v1/traces"),
        ("http://collector:4318/", "http://collector:4318/v1/traces"),
        ("https://otel.example/v1/traces", "https://otel.example/v1/traces"),
    ],
)
def test_traces_url(endpoint: str, url: str) -> None:
    assert traces_url(endpoint) == url


def test_a_collector_that_is_away_fails_no_call(
    start_gateway: Callable[..., Gateway], engines: list[Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"  # nothing listens once closed
    token, digest = make_token()
    svc = service(unique("lost"), [engines[0].instance], [digest], models=("lost",))
    gateway = start_gateway(snapshot(1, svc), otlp_endpoint=closed)
    for _ in range(5):
        assert _call(gateway, token, "lost", uuid.uuid4().hex).status_code == 200
        time.sleep(0.03)


def test_export_failures_are_one_line_a_minute() -> None:
    failures = ExportFailures(every_s=60)
    try:
        raise ConnectionError("refused")
    except ConnectionError:
        exc_info = sys.exc_info()
    records = [
        logging.LogRecord("otel", logging.ERROR, "f", 1, "Exception while exporting Span batch.",
                          None, exc_info)
        for _ in range(3)
    ]  # fmt: skip
    assert [failures.filter(r) for r in records] == [True, False, False]
    assert records[0].exc_info is None
    assert records[0].getMessage() == (
        "Exception while exporting Span batch. (refused); traces are being lost"
    )


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v1/chat/completions", "chat"),
        ("/v1/completions", "text_completion"),
        ("/api/predict/svc/v1/completions", "text_completion"),
        ("/v1/embeddings", "embeddings"),
        ("/", "other"),
    ],
)
def test_operation_names_follow_the_genai_conventions(path: str, name: str) -> None:
    assert operation(path) == name


@pytest.mark.parametrize(
    ("variables", "endpoint"),
    [
        ({}, ""),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318"}, "http://otel:4318"),
        ({"WHARF_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://b"},
         "http://a:4318"),
    ],
)  # fmt: skip
def test_the_endpoint_setting(
    variables: dict[str, str], endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("WHARF_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert config.otlp_endpoint() == endpoint


def test_an_endpoint_that_is_not_a_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHARF_OTLP_ENDPOINT", "collector:4317")
    with pytest.raises(config.ConfigError, match="WHARF_OTLP_ENDPOINT"):
        config.otlp_endpoint()
