"""An instance's log, read on its node whichever host serves the API: the API asks through
Redis (a request list per node), and that node's worker answers from its own runtime."""

from __future__ import annotations

import json
import logging
import secrets
import threading

from workers.locks import client

log = logging.getLogger(__name__)
REQUESTS = "wharf:logs:{node}"
REPLY_TTL = 30  # seconds an answer nobody collected stays in Redis


def fetch(node: str, instance: str, tail: int, timeout: float = 5.0) -> str | None:
    """The last `tail` lines of `instance`'s log from `node`; None if it does not answer."""
    reply = f"wharf:logs:reply:{secrets.token_hex(8)}"
    redis = client()
    request = json.dumps({"instance": instance, "tail": tail, "reply": reply})
    key = REQUESTS.format(node=node)
    with redis.pipeline() as pipe:
        pipe.rpush(key, request)
        pipe.expire(key, 60)
        pipe.execute()
    answer = redis.blpop([reply], timeout=timeout)
    if answer is None:
        return None
    text = answer[1]
    return text.decode(errors="replace") if isinstance(text, bytes) else str(text)


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
