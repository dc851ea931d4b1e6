"""The load: streamed OpenAI completions through the gateway, timed one by one.

Every request streams (`stream_options.include_usage`, so the engine's own token counts come
back in the last event) and asks `ignore_eos`, so the engine generates exactly max_tokens.
The static benchmark sends its requests in waves of `parallel_num` at once, the next wave when
the last has finished (ModelArts' benchmark_parallel); the dynamic one sends each at its time
on a Poisson schedule, whether or not earlier ones have finished (benchmark_serving), so a
slow engine builds a queue as it would under real traffic.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from wharfcli.bench.prompts import BenchRequest, PromptTokenizer
from wharfcli.bench.stats import RequestResult
from wharfcli.client import describe_refusal

PROBE_TEXT_TOKENS = 16


class TokenCountError(RuntimeError):
    """The tokenizer does not count a prompt as the engine does."""


@dataclass(frozen=True)
class Target:
    """Where requests go: the gateway's completions URL, the model's name, the token."""

    url: str
    model: str
    token: str
    timeout_s: float = 600.0

    def body(self, request: BenchRequest) -> dict:
        return {
            "model": self.model,
            "prompt": request.prompt,
            "max_tokens": request.output_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=httpx.Timeout(self.timeout_s, connect=10.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )


@dataclass
class _Stream:
    ttft_s: float | None = None
    chunks: int = 0
    usage: dict | None = None

    def take(self, line: str, elapsed_s: float) -> bool:
        """Reads one SSE line; False at the end of the stream. Raises ValueError on an error
        event or a chunk that is not JSON."""
        if not line.startswith("data:"):
            return True
        data = line[5:].strip()
        if data == "[DONE]":
            return False
        chunk = json.loads(data)
        if not isinstance(chunk, dict) or chunk.get("error"):
            raise ValueError(f"the stream ended with an error: {data[:300]}")
        if chunk.get("choices"):
            self.chunks += 1
            if self.ttft_s is None:
                self.ttft_s = elapsed_s
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        return True


def _failed(request: BenchRequest, start: float, error: str) -> RequestResult:
    return RequestResult(request.prompt_tokens, request.output_tokens, ok=False,
                         latency_s=time.perf_counter() - start, error=error)  # fmt: skip


async def send(http: httpx.AsyncClient, target: Target, request: BenchRequest) -> RequestResult:
    """One streamed request, timed from sending it."""
    start = time.perf_counter()
    stream = _Stream()
    try:
        async with http.stream("POST", target.url, json=target.body(request)) as response:
            if response.status_code != 200:
                await response.aread()
                message = describe_refusal(response).replace("\n", " ")
                return _failed(request, start, f"HTTP {response.status_code}: {message}")
            async for line in response.aiter_lines():
                if not stream.take(line, time.perf_counter() - start):
                    break
    except httpx.HTTPError as exc:
        return _failed(request, start, f"{type(exc).__name__}: {exc}".rstrip(": "))
    except ValueError as exc:
        return _failed(request, start, str(exc))
    usage = stream.usage or {}
    prompt, output = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return RequestResult(
        request.prompt_tokens, request.output_tokens, ok=True,
        latency_s=time.perf_counter() - start, ttft_s=stream.ttft_s,
        prompt_tokens=prompt if isinstance(prompt, int) else None,
        output_tokens=output if isinstance(output, int) else stream.chunks,
    )  # fmt: skip


async def _waves(target: Target, waves: Sequence[Sequence[BenchRequest]]):
    results: list[RequestResult] = []
    busy_s = 0.0
    async with target.client() as http:
        for wave in waves:
            start = time.perf_counter()
            results += await asyncio.gather(*(send(http, target, r) for r in wave))
            busy_s += time.perf_counter() - start
    return results, busy_s


def run_static(
    target: Target, waves: Sequence[Sequence[BenchRequest]]
) -> tuple[list[RequestResult], float]:
    """Each wave (an epoch: parallel_num requests) sent at once; the results, and the seconds
    the waves took together."""
    return asyncio.run(_waves(target, waves))


async def _scheduled(target: Target, requests: Sequence[BenchRequest], times: Sequence[float]):
    async with target.client() as http:
        start = time.perf_counter()
        tasks = []
        for request, due in zip(requests, times, strict=True):
            delay = start + due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send(http, target, request)))
        results = list(await asyncio.gather(*tasks))
        return results, time.perf_counter() - start


def run_dynamic(
    target: Target, requests: Sequence[BenchRequest], times: Sequence[float]
) -> tuple[list[RequestResult], float]:
    """Each request sent at its time (seconds from the start); the results, and the seconds
    from the first send to the last answer."""
    return asyncio.run(_scheduled(target, requests, times))


def _probe(target: Target, tokenizer: PromptTokenizer, rng: random.Random) -> RequestResult:
    tokens = tokenizer.special + PROBE_TEXT_TOKENS
    request = BenchRequest(tokenizer.exact_prompt(tokens, rng), tokens, 1)
    (result,), _ = run_static(target, [[request]])
    if not result.ok:
        raise TokenCountError(f"the first request failed: {result.error}")
    return result


def check_token_counts(
    target: Target, tokenizer: PromptTokenizer, rng: random.Random
) -> tuple[PromptTokenizer, str]:
    """The tokenizer, corrected to count prompts as the engine does (its usage.prompt_tokens),
    and a line saying what was found. Also warms the service up before anything is timed."""
    result = _probe(target, tokenizer, rng)
    asked = result.asked_prompt_tokens
    if result.prompt_tokens is None:
        return tokenizer, "the engine reports no token counts; prompt lengths are not checked"
    if result.prompt_tokens == asked:
        return tokenizer, (f"token counts checked: the engine counts a {asked}-token prompt as "
                           f"{asked} ({tokenizer.special} special)")  # fmt: skip
    delta = result.prompt_tokens - asked
    adjusted = tokenizer.adjusted(delta)
    if adjusted.special >= 0:
        again = _probe(target, adjusted, rng)
        if again.prompt_tokens == again.asked_prompt_tokens:
            return adjusted, (
                f"token counts checked: the engine adds {adjusted.special} special token(s) to "
                f"a prompt (the tokenizer said {tokenizer.special})"
            )
    raise TokenCountError(
        f"the engine counts {result.prompt_tokens} tokens in a prompt this tokenizer counts as "
        f"{asked}: it is not the tokenizer of the model the service runs; pass --tokenizer "
        "with the model's folder"
    )
