"""Prefix-cache-aware routing against least-outstanding, side by side on real vLLM CPU engines.

The workload AIBrix and llm-d measure: a few long system prompts shared by many users, each
request one system prompt plus a short question of its user's. Each side starts its engines
afresh (prefix caching on, the tiny model), points a gateway at them with the policy under
test, and sends the same requests in the same order. It prints, per policy, the time to first
token (p50/p99) and whole-request latency seen by the callers, and each engine's own
prefix-cache hit rate (`vllm:prefix_cache_hits` over `vllm:prefix_cache_queries`, read from
its /metrics before and after).

The engines' KV caches are sized (`--num-gpu-blocks-override`) so that one engine holds about
its share of the system prompts, not all of them: a fleet serving more prompts than one
engine can cache is where routing decides the hit rate, as it does in production.

One request at a time by default: the engines share the machine's cores with each other, the
gateway and this script, so with several in flight one engine's decoding slows another's
prefill on the CPU, a wait no accelerator-backed fleet has, added to both sides alike
(`--concurrency` measures it; the README gives both).

    .venv/bin/python benchmarks/prefix_routing.py            # about 9 minutes
    .venv/bin/python benchmarks/prefix_routing.py --quick    # fewer requests, for a test
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (  # noqa: E402
    DEFAULT_REDIS_URL,
    VLLM_PYTHON,
    Processes,
    bench_snapshot,
    free_port,
    machine,
    publish,
    raise_on_sigterm,
    reset_redis,
    start_gateway,
    wait_http,
    wait_snapshot,
    write_tiny_model,
)
from loadgen import percentile  # noqa: E402

from contracts import engine_metrics  # noqa: E402

POLICIES = ("least_outstanding", "prefix_cache")
BLOCK = 32  # tokens per KV-cache block (vLLM CPU prefers multiples of 32)
MAX_MODEL_LEN = 2048  # the tiny model's positions; an engine's cache holds one such sequence
WORDS = ("the", "a", "of", "to", "and", "in", "that", "is", "for", "on", "with", "as", "by",
         "at", "from", "this", "be", "or", "an", "it", "are", "was")  # fmt: skip


def start_engine(procs: Processes, index: int, model: Path, blocks: int) -> str:
    port = free_port()
    argv = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    argv += ["--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager", "--enable-prefix-caching"]
    argv += ["--block-size", str(BLOCK), "--num-gpu-blocks-override", str(blocks)]
    argv += ["--max-num-seqs", "16"]
    # One thread each, placed by the OS: pinned engines share their cores with the gateway
    # and this script unevenly, which skews any comparison of routing between them.
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    procs.start(f"vllm-{index}", argv, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", procs, 300)
    return url


def counters(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        return engine_metrics.parse(response.read().decode(), time.time())


def warm_up(url: str) -> None:
    """One short request, so that an engine's first forward pass (its allocations, its
    kernels' first run: hundreds of milliseconds) counts against neither policy."""
    body = {"model": "tiny", "prompt": "warm up", "max_tokens": 2}
    httpx.post(url + "/v1/completions", json=body, timeout=60).raise_for_status()


def workload(args, seed: int = 7) -> list[str]:
    """The prompts, in order: each a system prompt and one user's question."""
    rng = random.Random(seed)
    systems = [
        f"System prompt {i}: " + " ".join(rng.choice(WORDS) for _ in range(args.prefix_words))
        for i in range(args.prompts)
    ]
    users = [(u % args.prompts, u) for u in range(args.users)]  # as many users per prompt
    prompts = []
    for n in range(args.requests):
        system, user = users[rng.randrange(len(users))]
        prompts.append(f"{systems[system]}\nUser {user} asks question {n}: why?")
    return prompts


async def call(client: httpx.AsyncClient, url: str, key: str, prompt: str) -> tuple[float, float]:
    """(time to first token, whole request) in seconds, streamed."""
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 8, "stream": True, "temperature": 0}
    started = time.perf_counter()
    first = None
    async with client.stream("POST", url + "/v1/completions", json=body,
                             headers={"authorization": f"Bearer {key}"}) as response:  # fmt: skip
        response.raise_for_status()
        async for line in response.aiter_lines():
            if first is None and line.startswith("data: ") and line != "data: [DONE]":
                first = time.perf_counter() - started
    return first if first is not None else float("nan"), time.perf_counter() - started


async def drive(gateway: str, key: str, prompts: list[str], concurrency: int) -> list[tuple]:
    queue: asyncio.Queue[str] = asyncio.Queue()
    for prompt in prompts:
        queue.put_nowait(prompt)
    results: list[tuple[float, float]] = []

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            results.append(await call(client, gateway, key, queue.get_nowait()))

    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return results


def measure(args, policy: str, model: Path, prompts: list[str]) -> dict:
    with Processes() as procs:
        engines = [start_engine(procs, i, model, args.blocks) for i in range(args.engines)]
        for url in engines:
            warm_up(url)
        reset_redis(args.redis_url)
        gateway = start_gateway(procs, args.redis_url)
        snapshot, key, _ = bench_snapshot(engines, version=int(time.time() * 1000))
        snapshot.services["bench"] = replace(snapshot.services["bench"], routing=policy)
        publish(args.redis_url, snapshot)
        wait_snapshot(gateway, snapshot.version)
        before = [counters(url) for url in engines]
        started = time.perf_counter()
        results = asyncio.run(drive(gateway, key, prompts, args.concurrency))
        elapsed = time.perf_counter() - started
        after = [counters(url) for url in engines]
    pairs = list(zip(after, before, strict=True))
    queries = [a.get("prefix_queries", 0) - b.get("prefix_queries", 0) for a, b in pairs]
    hits = [a.get("prefix_hits", 0) - b.get("prefix_hits", 0) for a, b in pairs]
    ttft = [r[0] for r in results]
    latency = [r[1] for r in results]
    return {
        "policy": policy,
        "requests": len(results),
        "seconds": elapsed,
        "ttft_p50": percentile(ttft, 50),
        "ttft_p99": percentile(ttft, 99),
        "latency_p50": percentile(latency, 50),
        "hit_rate": sum(hits) / sum(queries) if sum(queries) else 0.0,
        "per_engine": [
            f"{h / q:.0%} of {q:.0f}" if q else "-" for h, q in zip(hits, queries, strict=True)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=12, help="distinct system prompts")
    parser.add_argument("--prefix-words", type=int, default=950, help="words per system prompt")
    parser.add_argument("--users", type=int, default=64)
    parser.add_argument("--requests", type=int, default=240)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument(
        "--blocks",
        type=int,
        default=0,
        help="KV blocks per engine (0: about its share of the prompts plus room)",
    )
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.prompts, args.prefix_words = 40, 4, 300
    raise_on_sigterm()
    prompts = workload(args)
    with tempfile.TemporaryDirectory() as tmp:
        model = write_tiny_model(Path(tmp) / "tiny")
        if not args.blocks:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
            tokens = len(tokenizer.encode(prompts[0]).ids)
            share = -(-args.prompts // args.engines)  # its share of the prompts
            # and each request in flight's own blocks (its question, what it generates)
            args.blocks = share * (tokens // BLOCK + 1) + args.concurrency * 4
            args.blocks = max(args.blocks, MAX_MODEL_LEN // BLOCK + 1)  # vLLM holds one back
        print(f"{machine()}; {args.engines} engines of {args.blocks} blocks of {BLOCK} tokens; "
              f"{args.prompts} system prompts of ~{args.prefix_words} words, {args.users} users, "
              f"{args.requests} requests, {args.concurrency} at a time")  # fmt: skip
        rows = [measure(args, policy, model, prompts) for policy in POLICIES]
    print(f"{'policy':<18} {'TTFT p50':>9} {'TTFT p99':>9} {'latency p50':>12} {'hit rate':>9}"
          "  per engine (hits of queried tokens)")  # fmt: skip
    for row in rows:
        print(f"{row['policy']:<18} {row['ttft_p50'] * 1000:>7.0f}ms "
              f"{row['ttft_p99'] * 1000:>7.0f}ms "
              f"{row['latency_p50'] * 1000:>10.0f}ms {row['hit_rate']:>9.1%}  "
              f"{', '.join(row['per_engine'])}")  # fmt: skip
    base, ours = rows
    print(
        f"prefix_cache: TTFT p50 {base['ttft_p50'] / ours['ttft_p50']:.1f}x lower, "
        f"hit rate {ours['hit_rate']:.0%} vs {base['hit_rate']:.0%}"
    )
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
