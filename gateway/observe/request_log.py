"""Services' request logs (a spec's `request_log`): each call's request and answer, kept as
JSON lines in `<folder>/<service>/<UTC date>-<host>-<pid>.jsonl`, a file per gateway process
and day, and deleted once older than the service's `keep_days`.

Nothing here can slow or fail a call: the proxy hands a finished call's entry to `add`, which
only appends it to a queue bounded in bytes (past the bound the entry is dropped and counted),
and a background task writes the queue out in a thread. Folders are 0700, files 0600: the
entries hold the callers' prompts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contracts.routing import RequestLogRouting, Snapshot
from contracts.spec_request_log import DEFAULT_KEEP_DAYS
from contracts.usage import usage_model
from gateway.relay import request_id

if TYPE_CHECKING:
    from gateway.plane import Call

log = logging.getLogger(__name__)

# What the queue may hold before entries are dropped (each entry is at most twice its
# service's max_body_bytes, 1 MiB, plus its figures).
DEFAULT_BUFFER_BYTES = 64 * 1024 * 1024
PRUNE_INTERVAL_S = 3600.0
_SUFFIX = ".jsonl"


@dataclass(frozen=True)
class Entry:
    service: str
    day: date
    line: bytes  # one JSON document and its newline


def entry_line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def kept_text(body: bytes, limit: int) -> tuple[str, bool]:
    """Up to `limit` bytes of `body` as text (invalid UTF-8 replaced), and whether it was cut."""
    return body[:limit].decode("utf-8", "replace"), len(body) > limit


def keep_head(kept: bytearray, chunk: bytes, settings: RequestLogRouting | None) -> None:
    """Add to the answer's head up to the service's cap and a byte past it (telling it was
    cut): what the proxy keeps of an answer it relays, for the request log."""
    assert settings is not None
    room = settings.max_body_bytes + 1 - len(kept)
    if room > 0:
        kept += chunk[:room]


def call_entry(
    call: Call,
    asked: bytes,
    status: int,
    latency: float,
    counts: tuple[int, int] | None,
    answer: bytes,
) -> dict[str, Any]:
    """A finished call's entry: what was asked and answered (each cut at the service's cap),
    its status, latency, tokens and caller's key id."""
    assert call.service.request_log is not None
    limit = call.service.request_log.max_body_bytes
    request, request_cut = kept_text(asked, limit)
    response, response_cut = kept_text(answer, limit)
    return {
        "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "request_id": request_id.current(), "service": call.service.name,
        "model": usage_model(call.service.name, call.adapter), "key_id": call.key_id,
        "method": call.method, "path": call.path, "status": status,
        "latency_ms": round(latency * 1000),
        "prompt_tokens": counts[0] if counts else None,
        "completion_tokens": counts[1] if counts else None,
        "request": request, "response": response, "truncated": request_cut or response_cut,
    }  # fmt: skip


def expired(names: list[str], today: date, keep_days: int) -> list[str]:
    """The log files of `names` (`<YYYY-MM-DD>-....jsonl`) older than `keep_days` days, the
    day `today` counting as the first. Names that are not log files are left alone."""
    oldest = today - timedelta(days=keep_days - 1)
    out = []
    for name in names:
        if not name.endswith(_SUFFIX):
            continue
        try:
            day = date.fromisoformat(name[:10])
        except ValueError:
            continue
        if day < oldest:
            out.append(name)
    return out


class RequestLog:
    """The gateway process's writer of request logs."""

    def __init__(self, folder: Path, buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
        self.folder = folder
        self.buffer_bytes = buffer_bytes
        self.dropped = 0  # entries not kept because the queue was full
        self.written = 0
        self._queue: deque[Entry] = deque()
        self._queued_bytes = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._keep: dict[str, int] | None = None  # service -> keep_days, once a snapshot came
        self._pruned_at = 0.0
        self._process = f"{socket.gethostname()}-{os.getpid()}"

    def seen(self, snapshot: Snapshot) -> None:
        """Each service's retention, from the routing snapshot (read at every reload)."""
        keep = {
            name: svc.request_log.keep_days
            for name, svc in snapshot.services.items()
            if svc.request_log is not None
        }
        if keep != self._keep:
            self._keep = keep
            self._pruned_at = 0.0  # a changed retention applies now, not within the hour
            self._wake.set()

    def add(self, service: str, record: dict[str, Any]) -> None:
        """Queue one call's entry; dropped (and counted) when the queue is full."""
        line = entry_line(record)
        if self._queued_bytes + len(line) > self.buffer_bytes:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("request log queue full: %d entries dropped so far", self.dropped)
            return
        self._queue.append(Entry(service, datetime.now(UTC).date(), line))
        self._queued_bytes += len(line)
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="request-log")

    async def stop(self) -> None:
        """Write out what is queued, then stop."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._flush()

    async def _run(self) -> None:
        while True:
            try:
                async with asyncio.timeout(PRUNE_INTERVAL_S):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            await self._flush()
            if self._keep is not None and time.monotonic() - self._pruned_at > PRUNE_INTERVAL_S:
                self._pruned_at = time.monotonic()
                try:
                    await asyncio.to_thread(self.prune, datetime.now(UTC).date())
                except OSError as exc:
                    log.warning("old request logs not deleted in %s: %s", self.folder, exc)

    async def _flush(self) -> None:
        """Write out the queue; a full or read-only disk loses these entries, never a call."""
        entries = self._take()
        if not entries:
            return
        try:
            await asyncio.to_thread(self._write, entries)
        except OSError as exc:
            self.dropped += len(entries)
            log.warning("request log not written in %s: %s", self.folder, exc)

    def _take(self) -> list[Entry]:
        entries = list(self._queue)
        self._queue.clear()
        self._queued_bytes = 0
        return entries

    def _write(self, entries: list[Entry]) -> None:
        """Append the entries to their services' files of the day (in a thread)."""
        files: dict[tuple[str, date], list[bytes]] = {}
        for entry in entries:
            files.setdefault((entry.service, entry.day), []).append(entry.line)
        for (service, day), lines in files.items():
            folder = self.folder / service
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = folder / f"{day.isoformat()}-{self._process}{_SUFFIX}"
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "ab") as out:
                out.write(b"".join(lines))
            self.written += len(lines)

    def prune(self, today: date) -> list[Path]:
        """Delete the log files past their service's retention: the snapshot's keep_days, or
        DEFAULT_KEEP_DAYS for a service that no longer keeps a log (or no longer exists)."""
        keep = self._keep or {}
        removed: list[Path] = []
        if not self.folder.is_dir():
            return removed
        for folder in self.folder.iterdir():
            if not folder.is_dir():
                continue
            days = keep.get(folder.name, DEFAULT_KEEP_DAYS)
            for name in expired(os.listdir(folder), today, days):
                (folder / name).unlink(missing_ok=True)
                removed.append(folder / name)
        return removed
