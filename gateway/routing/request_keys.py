"""What a request offers the cache-aware routing policies (gateway.routing.policies.RoutingKey): its
prompt's text for prefix_cache, its session header for session. Only what a policy in use
needs is read.

The prompt's text is what the engine's prefix cache is keyed by, in order: the model (a LoRA
adapter has a cache of its own), then a completion's `prompt` (or an embedding's `input`), or
a chat's `messages`, each as its role then its content (a content of parts: the text parts'
text, any other part as its JSON, so that an image shared by two requests matches too). Only
the first MAX_BLOCKS blocks are hashed, so the text stops there.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from gateway.routing.policies import BLOCK_CHARS, MAX_BLOCKS, PREFIX_CACHE, SESSION, RoutingKey

PROMPT_CHARS = BLOCK_CHARS * MAX_BLOCKS
# A session id longer than this is cut: it is only hashed.
_SESSION_CHARS = 256


def routing_key(
    used: Collection[str],
    data: dict[str, Any] | None,
    headers: Mapping[str, str],
    session_header: str,
    adapter: str = "",
) -> RoutingKey | None:
    """The key for the policies in `used` (a service's, and its prefill pool's) and for the
    LoRA `adapter` called; None when nothing needs one or the request offers none."""
    prompt = prompt_text(data) if PREFIX_CACHE in used and data is not None else None
    session = headers.get(session_header) if SESSION in used and session_header else None
    if not prompt and not session and not adapter:
        return None
    return RoutingKey(prompt=prompt or None, session=session[:_SESSION_CHARS] if session else None,
                      adapter=adapter)  # fmt: skip


class _Text:
    """Pieces of text, counted as they come, so that long prompts stop at PROMPT_CHARS."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.length = 0

    def append(self, piece: str) -> None:
        self.pieces.append(piece)
        self.length += len(piece)

    @property
    def full(self) -> bool:
        return self.length >= PROMPT_CHARS


def prompt_text(data: dict[str, Any]) -> str | None:
    """The text a request's prompt starts with (at most PROMPT_CHARS), or None without one."""
    text = _Text()
    messages = data.get("messages")
    if isinstance(messages, list):
        _add_messages(text, messages)
    else:
        _add_prompt(text, data.get("prompt", data.get("input")))
    if not text.length:
        return None
    model = data.get("model")
    head = f"{model}\n" if isinstance(model, str) else ""
    return (head + "".join(text.pieces))[:PROMPT_CHARS]


def _add_prompt(pieces: _Text, prompt: Any) -> None:
    """A completion's prompt: a string, token ids, or a batch of either."""
    if isinstance(prompt, str):
        pieces.append(prompt)
    elif isinstance(prompt, list):
        for item in prompt:
            if pieces.full:
                return
            if isinstance(item, str):
                pieces.append(item + "\n")
            elif isinstance(item, int) and not isinstance(item, bool):
                pieces.append(f"{item} ")
            elif isinstance(item, list):
                pieces.append(" ".join(str(t) for t in item) + "\n")


def _add_messages(pieces: _Text, messages: list[Any]) -> None:
    for message in messages:
        if pieces.full:
            return
        if not isinstance(message, dict):
            continue
        pieces.append(f"{message.get('role', '')}\n")
        content = message.get("content")
        if isinstance(content, str):
            pieces.append(content)
        elif isinstance(content, list):
            for part in content:
                text = part.get("text") if isinstance(part, dict) else None
                pieces.append(text if isinstance(text, str) else _as_json(part))
        pieces.append("\n")


def _as_json(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return ""
