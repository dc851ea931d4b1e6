"""The node's side of reading an instance's log (contracts.node_logs): this node's worker
answers the requests queued for it from its own runtime. NodeRequestServer is the loop every
such read shares (workers.nodes.node_tokenizer's too)."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from contracts.node_logs import REPLY_TTL, REQUESTS
from workers.locks import client

log = logging.getLogger(__name__)


def reply(redis: Any, key: str, text: str, ttl: int = REPLY_TTL) -> None:
    """The answer where the asker waits for it, gone after `ttl` s if nobody collects it."""
    with redis.pipeline() as pipe:
        pipe.rpush(key, text)
        pipe.expire(key, ttl)
        pipe.execute()


def serve_one(node: str, runtime, wait: float = 1.0) -> bool:
    """Answer one request if one comes within `wait` seconds; True if one was answered."""
    redis = client()
    item = redis.blpop([REQUESTS.format(node=node)], timeout=wait)
    if item is None:
        return False
    try:
        request = json.loads(item[1])
        text = runtime.logs(str(request["instance"]), int(request["tail"]))
        key = str(request["reply"])
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("node %s: unreadable log request: %s", node, exc)
        return False
    reply(redis, key, text)
    return True


class NodeRequestServer(threading.Thread):
    """Answers one kind of request queued for this node, next to its agent in the worker's
    main process: serve_one() waits a second for one and answers it."""

    what = "request"

    def __init__(self, node: str, runtime):
        super().__init__(name=f"wharf-node-{self.what}s", daemon=True)
        self.node, self.runtime = node, runtime
        self._stopped = threading.Event()

    def serve_one(self) -> bool:
        raise NotImplementedError

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.serve_one()
            except Exception as exc:  # Redis away, a runtime error: keep serving
                log.warning("node %s: answering a %s request failed: %s", self.node, self.what,
                            exc)  # fmt: skip
                self._stopped.wait(1.0)

    def stop(self) -> None:
        self._stopped.set()


class LogServer(NodeRequestServer):
    """Answers this node's log requests."""

    what = "log"

    def serve_one(self) -> bool:
        return serve_one(self.node, self.runtime)
