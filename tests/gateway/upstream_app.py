"""A minimal OpenAI-compatible engine, served for real by uvicorn in the gateway tests.

Request bodies may carry test knobs next to the OpenAI fields:
- `delay`: seconds to wait before answering (to provoke gateway timeouts);
- `chunk_delay`: seconds between streamed chunks (to observe streaming);
- `max_tokens`: how many tokens (chunks) to produce at most;
- `stop_after`: stop after this many tokens, as a stop sequence would (fewer than max_tokens).
Streams honour `stream_options.include_usage` as vLLM does: one last event with empty
`choices` and the usage, and no `usage` field on the other events.
`/v1/embeddings` answers as vLLM does for an embedding model, `/v1/responses` as it does for
the Responses API (usage in input and output tokens); `/status/<code>` answers an
empty body with that status. Requests with an `x-test-id` header are recorded in `Recorder`,
so tests can see what the engine saw and when: its body, when it finished, and whether the
client went away (an abort).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route


@dataclass
class Seen:
    finished_at: float | None = None
    aborted: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)


class Recorder:
    def __init__(self) -> None:
        self.seen: dict[str, Seen] = {}

    def start(self, request: Request) -> Seen:
        seen = Seen(headers=dict(request.headers))
        test_id = request.headers.get("x-test-id")
        if test_id:
            self.seen[test_id] = seen
        return seen


def _usage(prompt: Any, tokens: int) -> dict[str, int]:
    prompt_tokens = len(str(prompt).split())
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": tokens,
        "total_tokens": prompt_tokens + tokens,
    }


def _sse(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return f"data: {text}\n\n".encode()


async def _wait_unless_disconnected(request: Request, seconds: float, seen: Seen) -> bool:
    """Sleep like a busy engine; False (and an abort recorded) if the client left meanwhile."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await request.is_disconnected():
            seen.aborted = True
            return False
        await asyncio.sleep(0.02)
    return True


def create_upstream(name: str, recorder: Recorder) -> Starlette:
    """An engine whose generated text names it, so tests can tell instances apart."""

    async def generate(request: Request, chat: bool) -> Response:
        seen = recorder.start(request)
        body = await request.json()
        seen.body = body
        tokens = int(body.get("max_tokens") or 3)
        tokens = min(tokens, int(body.get("stop_after", tokens)))
        model = body.get("model", "unknown")
        prompt = body.get("messages") if chat else body.get("prompt")
        if not await _wait_unless_disconnected(request, float(body.get("delay", 0)), seen):
            return Response(status_code=499)
        kind = "chat.completion" if chat else "text_completion"
        if body.get("stream"):
            options = body.get("stream_options") or {}
            usage = _usage(prompt, tokens) if options.get("include_usage") else None
            delay = float(body.get("chunk_delay", 0.01))
            return StreamingResponse(
                _stream(seen, model, kind, chat, tokens, delay, usage),
                media_type="text/event-stream",
            )
        text = "".join(f"{name}-{i} " for i in range(tokens))
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice.update(text=text, logprobs=None)
        seen.finished_at = time.monotonic()
        return JSONResponse(
            {
                "id": f"cmpl-{name}",
                "object": kind,
                "created": int(time.time()),
                "model": model,
                "choices": [choice],
                "usage": _usage(prompt, tokens),
            }
        )

    async def _stream(
        seen: Seen,
        model: str,
        kind: str,
        chat: bool,
        tokens: int,
        chunk_delay: float,
        usage: dict[str, int] | None,
    ) -> AsyncIterator[bytes]:
        try:
            for i in range(tokens):
                if i:
                    await asyncio.sleep(chunk_delay)
                piece = f"{name}-{i} "
                choice: dict[str, Any] = {"index": 0, "finish_reason": None}
                if chat:
                    choice["delta"] = {"content": piece}
                else:
                    choice.update(text=piece, logprobs=None)
                yield _sse(
                    {
                        "id": f"cmpl-{name}",
                        "object": f"{kind}.chunk" if chat else kind,
                        "created": int(time.time()),
                        "model": model,
                        "choices": [choice],
                    }
                )
            if usage is not None:
                yield _sse(
                    {
                        "id": f"cmpl-{name}",
                        "object": f"{kind}.chunk" if chat else kind,
                        "created": int(time.time()),
                        "model": model,
                        "choices": [],
                        "usage": usage,
                    }
                )
            seen.finished_at = time.monotonic()
            yield _sse("[DONE]")
        except asyncio.CancelledError:
            # Starlette cancels the stream when the client disconnects: an engine aborts here.
            seen.aborted = True
            raise

    async def completions(request: Request) -> Response:
        return await generate(request, chat=False)

    async def chat_completions(request: Request) -> Response:
        return await generate(request, chat=True)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def echo(request: Request) -> Response:
        """What arrived, for checking what the gateway forwards."""
        status = int(request.query_params.get("status", 200))
        return JSONResponse(
            {
                "instance": name,
                "method": request.method,
                "path": request.url.path,
                "raw_path": request.scope["raw_path"].decode(),
                "query": request.url.query,
                "headers": dict(request.headers),
                "body": (await request.body()).decode(),
            },
            status_code=status,
        )

    async def embeddings(request: Request) -> Response:
        """vLLM's answer for an embedding model: one vector per input, prompt tokens only."""
        seen = recorder.start(request)
        seen.body = body = await request.json()
        inputs = body.get("input")
        inputs = inputs if isinstance(inputs, list) else [inputs]
        tokens = sum(len(str(text).split()) for text in inputs)
        data = [
            {"object": "embedding", "index": i, "embedding": [0.25, -0.5, float(i)]}
            for i in range(len(inputs))
        ]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        model = body.get("model", "unknown")
        return JSONResponse({"object": "list", "data": data, "model": model, "usage": usage})

    async def responses(request: Request) -> Response:
        """The Responses API as vLLM answers it: usage in input and output tokens, streamed in
        the response.completed event."""
        seen = recorder.start(request)
        seen.body = body = await request.json()
        tokens = int(body.get("max_output_tokens") or 3)
        prompt_tokens = len(str(body.get("input")).split())
        usage = {"input_tokens": prompt_tokens, "output_tokens": tokens,
                 "total_tokens": prompt_tokens + tokens}  # fmt: skip
        response = {"id": f"resp-{name}", "object": "response", "status": "completed",
                    "output": [], "usage": usage}  # fmt: skip
        if not body.get("stream"):
            return JSONResponse(response)
        events = [
            {"type": "response.created", "response": {**response, "usage": None}},
            {"type": "response.output_text.delta", "delta": f"{name} "},
            {"type": "response.completed", "response": response},
        ]
        return StreamingResponse(
            iter([_sse(event) for event in events]), media_type="text/event-stream"
        )

    async def status(request: Request) -> Response:
        """An empty answer with the status asked for (204, 304...), and an ETag."""
        return Response(status_code=int(request.path_params["code"]), headers={"etag": '"v1"'})

    async def teapot(request: Request) -> Response:
        return PlainTextResponse("short and stout", status_code=418)

    return Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/health", health),
            Route("/status/{code:int}", status),
            Route("/teapot", teapot, methods=["GET", "POST"]),
            Route("/echo/{rest:path}", echo, methods=["GET", "POST"]),
        ]
    )
