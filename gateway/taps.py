"""Reading an engine's usage report from the answer as it is relayed, without holding it up.

- JsonTap keeps a bounded copy of a JSON answer's bytes and reads `usage` at the end.
- SseTap watches an event stream for the event carrying `usage` (sent when the request set
  stream_options.include_usage, which the gateway adds when the client did not) and can
  remove that event, so a client that never asked for it does not see it. Only events that
  mention "usage" are parsed; the rest pass by a substring search.
"""

from __future__ import annotations

import json
import re
from typing import Any

_JSON_COPY_LIMIT = 1 << 20
# Past the copy limit only the tail is kept: engines write `usage` last.
_JSON_TAIL = 8192
_TAIL_COUNTS = {
    "prompt_tokens": re.compile(rb'"prompt_tokens"\s*:\s*(\d+)'),
    "completion_tokens": re.compile(rb'"completion_tokens"\s*:\s*(\d+)'),
}


def token_counts(usage: object) -> tuple[int, int] | None:
    """(prompt, completion) tokens from an OpenAI `usage` object, if it has them."""
    if not isinstance(usage, dict):
        return None
    # An embeddings answer counts prompt tokens only.
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens", 0)
    if isinstance(prompt, int) and isinstance(completion, int):
        return prompt, completion
    return None


class JsonTap:
    def __init__(self) -> None:
        self._parts: list[bytes] | None = []
        self._size = 0
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        if self._parts is not None and self._size + len(chunk) <= _JSON_COPY_LIMIT:
            self._parts.append(chunk)
            self._size += len(chunk)
            return
        if self._parts is not None:
            self._tail, self._parts = b"".join(self._parts), None
        self._tail = (self._tail + chunk)[-_JSON_TAIL:]

    def usage(self) -> tuple[int, int] | None:
        if self._parts is None:
            found = [pattern.findall(self._tail) for pattern in _TAIL_COUNTS.values()]
            if all(found):
                return int(found[0][-1]), int(found[1][-1])
            return None
        try:
            answer: Any = json.loads(b"".join(self._parts))
        except ValueError:
            return None
        return token_counts(answer.get("usage")) if isinstance(answer, dict) else None


class SseTap:
    def __init__(self, strip_usage_event: bool) -> None:
        self._strip = strip_usage_event
        self._partial = b""
        self.events = 0  # data events seen: a fallback count of generated chunks
        self.counts: tuple[int, int] | None = None

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to send on now. Complete events are never held back.

        When stripping, an incomplete trailing event waits for its end (a client cannot use
        half an event anyway); otherwise the chunk goes on as is and only a copy waits.
        """
        data = self._partial + chunk if self._partial else chunk
        end = _events_end(data)
        complete, self._partial = data[:end], data[end:]
        if complete:
            self.events += complete.count(b"data:")
            if b'"usage"' in complete:
                complete = self._scan(complete)
        return complete if self._strip else chunk

    def finish(self) -> bytes:
        """What is left at the end of the stream (an unterminated last event)."""
        rest, self._partial = self._partial, b""
        if rest and b'"usage"' in rest:
            rest = self._scan(rest)
        return rest if self._strip else b""

    def _scan(self, complete: bytes) -> bytes:
        separator = b"\r\n\r\n" if b"\r\n\r\n" in complete else b"\n\n"
        events = complete.split(separator)
        kept = [event for event in events if not self._consume(event)]
        return complete if len(kept) == len(events) else separator.join(kept)

    def _consume(self, event: bytes) -> bool:
        """Record the usage an event reports; True if it is the usage-only event to strip."""
        if not _reports_usage(event):
            return False
        try:
            payload: Any = json.loads(_event_data(event))
        except ValueError:
            return False
        if not isinstance(payload, dict):
            return False
        counts = token_counts(payload.get("usage"))
        if counts is None:
            return False
        self.counts = counts
        return self._strip and payload.get("choices") == []


def _events_end(data: bytes) -> int:
    """Index just past the last event boundary in `data` (0: none)."""
    lf = data.rfind(b"\n\n")
    crlf = data.rfind(b"\r\n\r\n")
    return max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)


def _reports_usage(event: bytes) -> bool:
    """Whether `"usage"` appears with a value other than null (OpenAI sends null per chunk)."""
    at = event.find(b'"usage"')
    while at >= 0:
        value = event[at + 7 :].lstrip(b" \t:")
        if not value.startswith(b"null"):
            return True
        at = event.find(b'"usage"', at + 7)
    return False


def _event_data(event: bytes) -> bytes:
    lines = [line for line in event.splitlines() if line.startswith(b"data:")]
    return b"\n".join(line[5:].removeprefix(b" ") for line in lines)
