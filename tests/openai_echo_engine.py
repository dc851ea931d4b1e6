"""A small OpenAI-shaped engine for the batch tests, run as its own process: a POST to
/v1/chat/completions, /v1/completions or /v1/embeddings answers OpenAI's JSON with `usage`
(prompt tokens: the body's length / 10; completion tokens: 5), after holding `hold` seconds
when the body says; GET /log lists every call it took: [tag, started, ended] (monotonic
seconds; `tag` from the body, for telling online calls from queued ones).
`python tests/openai_echo_engine.py PORT`."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_lock = threading.Lock()
_log: list[list] = []


class _Engine(BaseHTTPRequestHandler):
    def _send(self, status: int, answer: object) -> None:
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        with _lock:
            self._send(200, list(_log))

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        started = time.monotonic()
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(400, {"error": {"message": "not JSON"}})
            return
        time.sleep(float(body.get("hold", 0)))
        with _lock:
            _log.append([body.get("tag", ""), started, time.monotonic()])
        if body.get("fail"):
            self._send(400, {"error": {"message": "asked to fail", "type": "invalid_request"}})
            return
        usage = {"prompt_tokens": len(raw) // 10, "completion_tokens": 5}
        usage["total_tokens"] = usage["prompt_tokens"] + 5
        text = json.dumps(body.get("messages") or body.get("prompt") or "")
        self._send(200, {
            "id": "chatcmpl-echo", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"), "usage": usage,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
        })  # fmt: skip

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), _Engine).serve_forever()
