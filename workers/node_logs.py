"""The node's side of reading an instance's log (contracts.node_logs): this node's worker
answers the requests queued for it from its own runtime."""

from __future__ import annotations

import json
import logging
import threading

from contracts.node_logs import REPLY_TTL, REQUESTS
from workers.locks import client

log = logging.getLogger(__name__)


def serve_one(node: str, runtime, wait: float = 1.0) -> bool:
    """Answer one request if one comes within `wait` seconds; True if one was answered."""
    redis = client()
    item = redis.blpop([REQUESTS.format(node=node)], timeout=wait)
    if item is None:
        return False
    try:
        request = json.loads(item[1])
        text = runtime.logs(str(request["instance"]), int(request["tail"]))
        reply = str(request["reply"])
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("node %s: unreadable log request: %s", node, exc)
        return False
    with redis.pipeline() as pipe:
        pipe.rpush(reply, text)
        pipe.expire(reply, REPLY_TTL)
        pipe.execute()
    return True


class LogServer(threading.Thread):
    """Answers this node's log requests, next to its agent in the worker's main process."""

    def __init__(self, node: str, runtime):
        super().__init__(name="wharf-node-logs", daemon=True)
        self.node, self.runtime = node, runtime
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                serve_one(self.node, self.runtime)
            except Exception as exc:  # Redis away, a runtime error: keep serving
                log.warning("node %s: answering a log request failed: %s", self.node, exc)
                self._stopped.wait(1.0)

    def stop(self) -> None:
        self._stopped.set()
