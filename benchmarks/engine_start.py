"""vLLM CPU as Wharf starts it, beside vLLM's own process layout: time to healthy, memory and
throughput.

Wharf renders a vLLM CPU instance with `VLLM_ENABLE_V1_MULTIPROCESSING=0`
(contracts.engines.vllm.render): the API server spawns the engine core, which runs the model's
worker in its own process. vLLM's default on CPU has the engine core spawn the worker as a
third process, which imports torch and vLLM once more. This starts the tiny model with the
command and environment Wharf renders for a local process, once as rendered and once with
the variable set back to vLLM's default, in alternating rounds. Per start it prints:

- seconds from the process's start to `/health` answering 200;
- the resident memory of the engine's processes together, once healthy;
- output tokens per second and request p50/p99 for `--requests` completions of 64 tokens,
  `--concurrency` at a time.

    .venv/bin/python benchmarks/engine_start.py               # about 4 minutes
    .venv/bin/python benchmarks/engine_start.py --rounds 1    # one start of each
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (  # noqa: E402
    VLLM_PYTHON,
    Processes,
    every_stat,
    free_port,
    machine,
    raise_on_sigterm,
    wait_http,
    write_tiny_model,
)
from loadgen import percentile  # noqa: E402

from contracts.engines import Placement, render  # noqa: E402
from contracts.spec import parse_spec  # noqa: E402

KEY = "bench-engine-key"
LAYOUTS = {
    "wharf (two processes)": {},
    "vLLM default (three)": {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"},
}


def argv_and_env(models: Path, port: int) -> tuple[list[str], dict[str, str]]:
    """The tiny model's command and environment, as Wharf renders them for a local process."""
    spec = parse_spec({"name": "bench", "llm": {"engine": "vllm-cpu", "model": "tiny",
                                                "max_model_len": 512}})  # fmt: skip
    placement = Placement(in_container=False, model_store=str(models), host="127.0.0.1",
                          port=port, engine_key=KEY)  # fmt: skip
    plan = render(spec, placement)
    assert plan.args[0] == "python", plan.args
    return [str(VLLM_PYTHON), *plan.args[1:]], dict(plan.env)


def group_rss_mib(leader: int) -> float:
    """Resident memory of every process in the leader's process group, MiB."""
    # Fields 5 (the process group) and 24 (rss, in pages) of proc(5).
    pages = sum(int(fields[21]) for fields in every_stat() if int(fields[2]) == leader)
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


async def load(url: str, requests: int, concurrency: int) -> tuple[float, float, float]:
    """(output tokens per second, p50 s, p99 s) for `requests` completions of 64 tokens."""
    gate, latencies = asyncio.Semaphore(concurrency), []
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(headers=headers, timeout=300, trust_env=False) as client:

        async def one(i: int) -> None:
            async with gate:
                started = time.monotonic()
                body = {"model": "bench", "prompt": f"request {i} " * 20, "max_tokens": 64,
                        "ignore_eos": True}  # fmt: skip
                answer = await client.post(url + "/v1/completions", json=body)
                answer.raise_for_status()
                latencies.append(time.monotonic() - started)

        started = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(requests)))
        elapsed = time.monotonic() - started
    return requests * 64 / elapsed, percentile(latencies, 50), percentile(latencies, 99)


def one_start(models: Path, layout: dict[str, str], requests: int, concurrency: int) -> dict:
    port = free_port()
    argv, env = argv_and_env(models, port)
    url = f"http://127.0.0.1:{port}"
    with Processes() as procs:
        started = time.monotonic()
        procs.start("vllm", argv, env={**env, **layout})
        wait_http(url + "/health", procs, 300)
        healthy = time.monotonic() - started
        rss = group_rss_mib(procs.pid("vllm"))
        asyncio.run(load(url, concurrency, concurrency))  # the first requests, not counted
        tokens, p50, p99 = asyncio.run(load(url, requests, concurrency))
    return {"healthy": healthy, "rss": rss, "tokens": tokens, "p50": p50, "p99": p99}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="starts of each layout")
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    raise_on_sigterm()
    if not VLLM_PYTHON.exists():
        sys.exit(f"no vLLM CPU build at {VLLM_PYTHON}: run `make engines`")
    print(machine())
    rows: list[tuple[str, dict]] = []
    with tempfile.TemporaryDirectory(prefix="wharf-bench-") as folder:
        models = Path(folder)
        write_tiny_model(models / "tiny")
        for round_ in range(args.rounds):
            for name, layout in LAYOUTS.items():
                result = one_start(models, layout, args.requests, args.concurrency)
                rows.append((name, result))
                print(f"round {round_ + 1}: {name}: healthy in {result['healthy']:.1f} s",
                      flush=True)  # fmt: skip
    print(f"\n{args.requests} completions of 64 tokens, {args.concurrency} at a time\n")
    print("| layout | healthy after s | memory MiB | output tok/s | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['healthy']:.1f} | {r['rss']:,.0f} | {r['tokens']:,.0f} | "
              f"{r['p50'] * 1000:,.0f} | {r['p99'] * 1000:,.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
