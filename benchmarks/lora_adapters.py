"""LoRA adapters on one vLLM CPU engine: the base model and an adapter side by side, and the
time to load an adapter while the engine runs.

One engine serves the tiny model with two tiny adapters (written by the project, as the tests
use them) the way Wharf starts it (contracts.engines.vllm.lora_args, and the runtime LoRA
routes on as a node keeps them). Requests alternate between the base model and adapter sql,
one at a time. Per model it prints the time to first token (p50/p90: a request for one token,
answered whole) and the output tokens per second (a request for `--tokens` tokens: those after
the first, over its time past the model's median time to first token; the tiny model decodes
so fast that a stream's events arrive in bursts, so the stream's own timing says little). Then
it loads new adapters into the running engine as a node's agent does (`POST
/v1/load_lora_adapter`) and prints how long a load takes, and the first request's time to
first token on the adapter just loaded; each is unloaded after.

    .venv/bin/python benchmarks/lora_adapters.py            # about 2 minutes
    .venv/bin/python benchmarks/lora_adapters.py --quick    # fewer requests
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (  # noqa: E402
    VLLM_PYTHON,
    Processes,
    free_port,
    machine,
    raise_on_sigterm,
    wait_http,
)
from loadgen import percentile  # noqa: E402

from contracts.engines.vllm import lora_args  # noqa: E402
from contracts.spec import parse_spec  # noqa: E402

PROMPT = "Hello world, the capital of France is a city where"


def start_engine(procs: Processes, model: Path, adapters: dict[str, Path]) -> str:
    spec = parse_spec({"name": "bench", "llm": {
        "engine": "vllm-cpu", "model": "tiny",
        "lora": {"adapters": [{"name": n, "model": str(p)} for n, p in adapters.items()],
                 "max_loras": 2, "max_rank": 8}}})  # fmt: skip
    assert spec.llm is not None
    port = free_port()
    argv = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    argv += ["--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--max-model-len", "512", "--enforce-eager"]
    argv += lora_args(spec.llm.lora, {n: str(p) for n, p in adapters.items()})
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    procs.start("vllm", argv, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", procs, 300)
    return url


def timed(client: httpx.Client, model: str, tokens: int) -> float:
    """Seconds one request for `tokens` tokens takes, answered whole."""
    body = {"model": model, "prompt": PROMPT, "max_tokens": tokens, "temperature": 0,
            "ignore_eos": True}  # fmt: skip
    started = time.perf_counter()
    answer = client.post("/v1/completions", json=body)
    answer.raise_for_status()
    assert answer.json()["usage"]["completion_tokens"] == tokens
    return time.perf_counter() - started


def side_by_side(client: httpx.Client, rounds: int, tokens: int) -> dict[str, dict]:
    """Per model: times to first token, and output tokens per second."""
    found: dict[str, dict] = {m: {"ttft": [], "whole": []} for m in ("tiny", "sql")}
    for model in found:  # each warmed up once, outside the figures
        timed(client, model, 4)
    for _ in range(rounds):
        for model, figures in found.items():
            figures["ttft"].append(timed(client, model, 1))
            figures["whole"].append(timed(client, model, tokens))
    for figures in found.values():
        first = percentile(figures["ttft"], 50)
        figures["rate"] = [(tokens - 1) / max(w - first, 1e-6) for w in figures["whole"]]
    return found


def runtime_loads(client: httpx.Client, folder: Path, count: int) -> tuple[list, list]:
    """(seconds a load took, first request's TTFT on it) for `count` adapters loaded anew."""
    from controlplane.services.tiny_model import write_tiny_lora

    loads, firsts = [], []
    for i in range(count):
        path = write_tiny_lora(folder / f"extra-{i}", seed=100 + i)
        started = time.perf_counter()
        answer = client.post("/v1/load_lora_adapter",
                             json={"lora_name": f"extra-{i}", "lora_path": str(path)})  # fmt: skip
        loads.append(time.perf_counter() - started)
        answer.raise_for_status()
        firsts.append(timed(client, f"extra-{i}", 1))
        client.post("/v1/unload_lora_adapter", json={"lora_name": f"extra-{i}"}).raise_for_status()
    return loads, firsts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="requests per model")
    parser.add_argument("--tokens", type=int, default=64, help="tokens each request generates")
    parser.add_argument("--loads", type=int, default=10, help="adapters loaded at run time")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.loads = 5, 3
    raise_on_sigterm()
    from controlplane.services.tiny_model import write_tiny_lora, write_tiny_model

    with tempfile.TemporaryDirectory() as tmp, Processes() as procs:
        root = Path(tmp)
        model = write_tiny_model(root / "tiny")
        adapters = {"sql": write_tiny_lora(root / "sql", seed=1),
                    "chat": write_tiny_lora(root / "chat", seed=2)}  # fmt: skip
        url = start_engine(procs, model, adapters)
        with httpx.Client(base_url=url, timeout=120, trust_env=False) as client:
            found = side_by_side(client, args.rounds, args.tokens)
            loads, firsts = runtime_loads(client, root, args.loads)
    print(f"{machine()}; one vLLM CPU engine, tiny model, adapters of rank 8 on every linear "
          f"layer; {args.rounds} rounds per model (one token, then {args.tokens}), one request "
          "at a time, alternating")  # fmt: skip
    print(f"{'model':<14} {'TTFT p50':>9} {'TTFT p90':>9} {'output tok/s p50':>17}")
    for model, figures in found.items():
        name = "base (tiny)" if model == "tiny" else f"adapter {model}"
        print(f"{name:<14} {percentile(figures['ttft'], 50) * 1000:>7.1f}ms "
              f"{percentile(figures['ttft'], 90) * 1000:>7.1f}ms "
              f"{percentile(figures['rate'], 50):>17.1f}")  # fmt: skip
    print(f"runtime load ({args.loads} adapters): p50 {percentile(loads, 50) * 1000:.0f} ms, "
          f"max {max(loads) * 1000:.0f} ms; first request's TTFT p50 "
          f"{percentile(firsts, 50) * 1000:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
