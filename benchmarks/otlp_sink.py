"""A small OTLP/HTTP traces receiver for the tracing benchmark: it decodes what the gateway
exports to /v1/traces, counts the spans and answers GET /count with the total.

    python benchmarks/otlp_sink.py PORT
"""

from __future__ import annotations

import argparse
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

_count = [0]
_lock = threading.Lock()


class Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        request = ExportTraceServiceRequest.FromString(
            self.rfile.read(int(self.headers["content-length"]))
        )
        spans = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        with _lock:
            _count[0] += spans
        self._answer(ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

    def do_GET(self) -> None:  # noqa: N802
        self._answer(str(_count[0]).encode(), "text/plain")

    def _answer(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port", type=int, help="where it listens on 127.0.0.1")
    ThreadingHTTPServer(("127.0.0.1", parser.parse_args().port), Sink).serve_forever()


if __name__ == "__main__":
    main()
