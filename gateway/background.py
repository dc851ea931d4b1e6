"""The gateway's background loops (snapshot watch, Redis probe, usage and lease flushes)."""

from __future__ import annotations

import asyncio
from contextlib import suppress


async def cancel(task: asyncio.Task[None] | None) -> None:
    """Stop a background loop and wait until it has: shutdown then leaves nothing running."""
    if task is None:
        return
    task.cancel()
    with suppress(asyncio.CancelledError):
        await task
