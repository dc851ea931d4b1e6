"""An instance's log, read on its node whichever host serves the API: the API pushes a request
onto the node's list in Redis and waits on a reply key of its own; that node's worker answers
from its runtime (workers.nodes.node_logs). No Django here: the caller hands its Redis client."""

from __future__ import annotations

import json
import secrets
from typing import Any

REQUESTS = "wharf:logs:{node}"
# The pseudo-node whose requests every worker of WHARF_RUNTIME=kubernetes answers from the
# cluster's pod logs (an Instance whose runtime is "kubernetes" is a pod).
CLUSTER = "kubernetes"
REQUEST_TTL = 60  # seconds a request nobody took stays queued
REPLY_TTL = 30  # seconds an answer nobody collected stays in Redis


def fetch(redis: Any, node: str, instance: str, tail: int, timeout: float = 5.0) -> str | None:
    """The last `tail` lines of `instance`'s log from `node`; None if it does not answer."""
    reply = f"wharf:logs:reply:{secrets.token_hex(8)}"
    request = json.dumps({"instance": instance, "tail": tail, "reply": reply})
    key = REQUESTS.format(node=node)
    with redis.pipeline() as pipe:
        pipe.rpush(key, request)
        pipe.expire(key, REQUEST_TTL)
        pipe.execute()
    answer = redis.blpop([reply], timeout=timeout)
    if answer is None:
        return None
    text = answer[1]
    return text.decode(errors="replace") if isinstance(text, bytes) else str(text)
