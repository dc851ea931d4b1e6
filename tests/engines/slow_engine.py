"""A one-file engine for rollout tests and benchmarks: an OpenAI-like /v1/completions that takes
its time, so that requests are still in flight while instances are replaced or drained.

Standard library only (it runs with whatever python3 the runtime puts first on PATH). Every
answer is `max_tokens` pieces (default CHUNKS), one every CHUNK_DELAY seconds; the text is
" 0 1 2 ...", so a client can tell a complete answer from a cut one. Streamed answers are SSE
events ending with `data: [DONE]` (with a usage event first when stream_options asks for one).
The answer names VERSION (from the environment) in `system_fingerprint` and in the
x-engine-version header, so a client can tell which spec served it.

Environment: PORT (required), HOST (default 0.0.0.0: a custom command is not told its node's
address, and on a second node of one machine the gateway reaches it at another loopback
address), VERSION, CHUNKS (10), CHUNK_DELAY (0.15), FAIL_EVERY (0: never; n: every n-th
completion is answered 500, for a canary that fails a share of its calls).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = os.environ.get("VERSION", "1")
CHUNKS = int(os.environ.get("CHUNKS", "10"))
DELAY = float(os.environ.get("CHUNK_DELAY", "0.15"))
FAIL_EVERY = int(os.environ.get("FAIL_EVERY", "0"))
COMPLETIONS = itertools.count(1)


def piece(i: int) -> str:
    return f" {i}"


def expected_text(tokens: int) -> str:
    return "".join(piece(i) for i in range(tokens))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real engine; streams are chunked
    disable_nagle_algorithm = True  # as real servers: no write waits for a delayed ACK

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        pass  # one line per request would only fill the instance log

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-engine-version", VERSION)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (the base's name)
        if self.path.split("?")[0] in ("/health", "/v1/models"):
            self._send(200, json.dumps({"status": "ok", "version": VERSION}).encode())
        else:
            self._send(404, b'{"error": "not found"}')

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        try:
            data = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, b'{"error": "bad json"}')
            return
        if self.path.split("?")[0] not in ("/v1/completions", "/completions"):
            self._send(404, b'{"error": "not found"}')
            return
        if FAIL_EVERY and next(COMPLETIONS) % FAIL_EVERY == 0:
            self._send(500, b'{"error": "failing on purpose (FAIL_EVERY)"}')
            return
        tokens = int(data.get("max_tokens") or CHUNKS)
        model = str(data.get("model") or "slow")
        usage = {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1}
        base = {"id": "cmpl-slow", "object": "text_completion", "created": int(time.time()),
                "model": model, "system_fingerprint": f"v{VERSION}"}  # fmt: skip
        if not data.get("stream"):
            time.sleep(tokens * DELAY)
            choice = {"index": 0, "text": expected_text(tokens), "finish_reason": "length"}
            self._send(200, json.dumps({**base, "choices": [choice], "usage": usage}).encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-engine-version", VERSION)
        self.end_headers()
        for i in range(tokens):
            time.sleep(DELAY)
            last = i == tokens - 1
            choice = {"index": 0, "text": piece(i), "finish_reason": "length" if last else None}
            self._event(json.dumps({**base, "choices": [choice]}))
        if (data.get("stream_options") or {}).get("include_usage"):
            self._event(json.dumps({**base, "choices": [], "usage": usage}))
        self._event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _event(self, payload: str) -> None:
        event = f"data: {payload}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.flush()


def main() -> None:
    server = ThreadingHTTPServer((os.environ.get("HOST", "0.0.0.0"), int(os.environ["PORT"])),
                                 Handler)  # fmt: skip
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
