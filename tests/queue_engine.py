"""A small engine for the queue tests, run as its own process so that a test can kill -9 it
while it works on an item: it answers a POST with what reached it (path, body, headers), its
pid and how many requests it was working on at once; a body {"hold": S} keeps it S seconds
first. `python tests/queue_engine.py PORT`."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_lock = threading.Lock()
_now = 0
_most = 0


class _Engine(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        global _now, _most
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        with _lock:
            _now += 1
            _most = max(_most, _now)
        try:
            try:
                hold = float(json.loads(body).get("hold", 0))
            except (ValueError, AttributeError):
                hold = 0.0
            time.sleep(hold)
            answer = json.dumps({"path": self.path, "body": body.decode(errors="replace"),
                                 "pid": os.getpid(), "most_at_once": _most,
                                 "authorized": "authorization" in self.headers}).encode()  # fmt: skip
        finally:
            with _lock:
                _now -= 1
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), _Engine).serve_forever()
