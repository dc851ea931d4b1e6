"""Reading an engine's usage report from the answer as it is relayed, without holding it up.

- JsonTap keeps a bounded copy of a JSON answer's bytes and reads `usage` at the end.
- SseTap watches an event stream for the event carrying `usage` (sent when the request set
  stream_options.include_usage, which the gateway adds when the client did not) and can
  remove that event, so a client that never asked for it does not see it. Only events that
  mention "usage" are parsed; the rest pass by a substring search.

Both are bounded, whatever the engine sends: the JSON copy keeps its head up to a limit and
then only a tail, and the event stream's unfinished event is held up to a limit, past which
SseTap raises EventTooLargeError (the proxy then ends the request). Each byte is looked at a fixed
number of times, so an engine cannot make the gateway's work grow faster than its answer.
"""

from __future__ import annotations

import json
import re
from typing import Any

# What the taps keep of one answer, unless the settings say otherwise (gateway.config).
JSON_COPY_LIMIT = 1 << 20
SSE_EVENT_LIMIT = 1 << 20
# Past the copy limit only the tail is kept: engines write `usage` last.
_JSON_TAIL = 8192
# (prompt, completion) in a tail: Chat Completions' names, else the Responses API's.
_TAIL_COUNTS = (
    (re.compile(rb'"prompt_tokens"\s*:\s*(\d+)'), re.compile(rb'"completion_tokens"\s*:\s*(\d+)')),
    (re.compile(rb'"input_tokens"\s*:\s*(\d+)'), re.compile(rb'"output_tokens"\s*:\s*(\d+)')),
)
# The longest event boundary ("\r\n\r\n") less one: how much of the held bytes a boundary
# that spans two reads can start in.
_BOUNDARY_OVERLAP = 3


class EventTooLargeError(Exception):
    """An engine's event went on past the limit without ending."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"an event of the stream grew past {limit} bytes without ending")
        self.limit = limit


def token_counts(usage: object) -> tuple[int, int] | None:
    """(prompt, completion) tokens from an OpenAI `usage` object, if it has them.

    Chat Completions names them prompt_tokens and completion_tokens (an embeddings answer
    counts prompt tokens only); the Responses API input_tokens and output_tokens.
    """
    if not isinstance(usage, dict):
        return None
    if "prompt_tokens" in usage:
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens", 0)
    else:
        prompt, completion = usage.get("input_tokens"), usage.get("output_tokens", 0)
    if type(prompt) is int and type(completion) is int:
        return prompt, completion
    return None


def answer_usage(answer: object) -> tuple[int, int] | None:
    """The counts of a whole answer or event: its `usage`, or (a Responses API event such as
    response.completed) its response's."""
    if not isinstance(answer, dict):
        return None
    counts = token_counts(answer.get("usage"))
    response = answer.get("response")
    if counts is None and isinstance(response, dict):
        counts = token_counts(response.get("usage"))
    return counts


class JsonTap:
    def __init__(self, copy_limit: int = JSON_COPY_LIMIT) -> None:
        self._limit = copy_limit
        self._parts: list[bytes] | None = []
        self._size = 0
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        if self._parts is not None and self._size + len(chunk) <= self._limit:
            self._parts.append(chunk)
            self._size += len(chunk)
            return
        if self._parts is not None:
            self._tail, self._parts = b"".join(self._parts)[-_JSON_TAIL:], None
        self._tail = (self._tail + chunk[-_JSON_TAIL:])[-_JSON_TAIL:]

    @property
    def held(self) -> int:
        """Bytes of the answer kept: at most the copy limit, then the tail."""
        return self._size if self._parts is not None else len(self._tail)

    def usage(self) -> tuple[int, int] | None:
        if self._parts is None:
            for patterns in _TAIL_COUNTS:
                found = [pattern.findall(self._tail) for pattern in patterns]
                if all(found):
                    return int(found[0][-1]), int(found[1][-1])
            return None
        try:
            answer: Any = json.loads(b"".join(self._parts))
        except ValueError:
            return None
        return answer_usage(answer)


class SseTap:
    def __init__(self, strip_usage_event: bool, event_limit: int = SSE_EVENT_LIMIT) -> None:
        self._strip = strip_usage_event
        self._limit = event_limit
        self._partial = bytearray()  # the unfinished event: at most `event_limit` bytes
        self.events = 0  # data events seen: a fallback count of generated chunks
        self.counts: tuple[int, int] | None = None

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to send on now. Complete events are never held back.

        When stripping, an incomplete trailing event waits for its end (a client cannot use
        half an event anyway); otherwise the chunk goes on as is and only a copy waits.
        Raises EventTooLargeError when the unfinished event outgrows the limit.
        """
        # A boundary is searched for in the new bytes only (and the few held ones it may
        # start in), never again in what is held: linear, however the event is split.
        overlap = min(len(self._partial), _BOUNDARY_OVERLAP)
        end = _events_end(bytes(self._partial[-overlap:]) + chunk if overlap else chunk)
        if end == 0:
            self._hold(chunk)
            return b"" if self._strip else chunk
        end -= overlap
        complete = bytes(self._partial) + chunk[:end] if self._partial else chunk[:end]
        self._partial.clear()
        self._hold(chunk[end:])
        self.events += complete.count(b"data:")
        if b'"usage"' in complete:
            complete = self._scan(complete)
        return complete if self._strip else chunk

    @property
    def held(self) -> int:
        """Bytes of an unfinished event kept: at most the event limit."""
        return len(self._partial)

    def finish(self) -> bytes:
        """What is left at the end of the stream (an unterminated last event)."""
        rest = bytes(self._partial)
        self._partial.clear()
        if rest and b'"usage"' in rest:
            rest = self._scan(rest)
        return rest if self._strip else b""

    def _hold(self, data: bytes) -> None:
        if len(self._partial) + len(data) > self._limit:
            self._partial.clear()
            raise EventTooLargeError(self._limit)
        self._partial += data

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
        counts = answer_usage(payload)
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
