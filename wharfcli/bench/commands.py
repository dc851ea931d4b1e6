"""`wharf bench static|dynamic|dataset|list`: ModelArts' benchmark_parallel.py,
benchmark_serving.py and generate_dataset.py against a Wharf service, and its stored runs."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from wharfcli.bench import datasets
from wharfcli.bench.arrivals import poisson_schedule
from wharfcli.bench.prompts import BenchRequest, PromptError
from wharfcli.bench.results import RUN_COLUMNS, run_summary
from wharfcli.bench.runner import run_dynamic, run_static
from wharfcli.bench.session import finish, open_session, say
from wharfcli.bench.stats import summarize
from wharfcli.bench.tokenizer_source import load_tokenizer
from wharfcli.bench.variadic import VariadicCommand
from wharfcli.client import USAGE, Client, CliError
from wharfcli.config import Config
from wharfcli.output import as_json, emit, output_option

MAX_PARALLEL = 4096
MAX_TOKENS = 1_048_576
MAX_PROMPTS = 1_000_000
MAX_RATE = 1e6
STATIC_LISTS = ("--parallel-num", "--prompt-tokens", "--output-tokens")
DYNAMIC_LISTS = ("--request-rate", "--num-prompts")


def run_options(command: Callable) -> Callable:
    """What static and dynamic share: the token, the tokenizer, the CSV, storing, the seed."""
    for option in reversed([
        click.option("--tokenizer", "tokenizer_dir", type=click.Path(file_okay=False),
                     help="the model's folder (tokenizer.json); default: the service's own, "
                     "fetched from the API"),
        click.option("--csv", "csv_path", type=click.Path(dir_okay=False),
                     help="write one row per point here (ModelArts' --benchmark-csv)"),
        click.option("--token", help="the service token or an API key (default: the one kept)"),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="seeds the prompts, the dataset's order and the arrivals"),
        click.option("--timeout", type=click.FloatRange(1), default=600.0, show_default=True,
                     help="seconds one request may take"),
        click.option("--store/--no-store", default=True, show_default=True,
                     help="keep the results in Wharf (GET /api/v1/services/NAME/benchmarks)"),
        output_option,
    ]):  # fmt: skip
        command = option(command)
    return command


@click.command(cls=VariadicCommand, variadic=STATIC_LISTS)
@click.argument("name")
@click.option(
    "--parallel-num",
    multiple=True,
    type=click.IntRange(1, MAX_PARALLEL),
    default=(1, 4, 8),
    show_default=True,
    metavar="N [N...]",
    help="concurrent requests in each epoch; several values make several points",
)
@click.option(
    "--prompt-tokens",
    multiple=True,
    type=click.IntRange(1, MAX_TOKENS),
    default=(1024,),
    show_default=True,
    metavar="N [N...]",
    help="prompt lengths, paired in order with --output-tokens",
)
@click.option(
    "--output-tokens",
    multiple=True,
    type=click.IntRange(1, MAX_TOKENS),
    default=(128,),
    show_default=True,
    metavar="N [N...]",
    help="output lengths, paired in order with --prompt-tokens",
)
@click.option(
    "--epochs",
    type=click.IntRange(1, 10_000),
    default=5,
    show_default=True,
    help="rounds of parallel-num requests per point",
)
@run_options
def static(name, parallel_num, prompt_tokens, output_tokens, epochs, tokenizer_dir, csv_path,
           token, seed, timeout, store) -> None:  # fmt: skip
    """Fixed lengths at fixed concurrency (ModelArts' benchmark_parallel.py). For each length
    pair and each concurrency N, EPOCHS rounds of N requests at once; throughput, latency,
    TTFT and TPOT per point. Example:

    wharf bench static NAME --parallel-num 1 4 8 --prompt-tokens 1024 2048
    --output-tokens 128 256 --epochs 5 --csv out.csv"""
    if len(prompt_tokens) != len(output_tokens):
        counts = f"got {len(prompt_tokens)} and {len(output_tokens)}"
        raise CliError("--prompt-tokens and --output-tokens pair up in order: give as many "
                       f"of each ({counts})", USAGE)  # fmt: skip
    session = open_session(name, token, tokenizer_dir, timeout, seed)
    pairs = list(zip(prompt_tokens, output_tokens, strict=True))
    say(f"static: {len(pairs)} length pair(s) x {len(parallel_num)} concurrency level(s), "
        f"{epochs} epoch(s) each")  # fmt: skip
    rows = []
    for prompt, output in pairs:
        for parallel in parallel_num:
            try:
                waves = [[BenchRequest(session.tokenizer.exact_prompt(prompt, session.rng),
                                       prompt, output) for _ in range(parallel)]
                         for _ in range(epochs)]  # fmt: skip
            except PromptError as exc:
                raise CliError(f"--prompt-tokens {prompt}: {exc}", USAGE) from None
            results, busy_s = run_static(session.target, waves)
            row = {"parallel_num": parallel, "prompt_tokens": prompt, "output_tokens": output,
                   **summarize(results, busy_s)}  # fmt: skip
            session.record("static", row, results)
            rows.append(row)
    parameters = {"parallel_num": list(parallel_num), "prompt_tokens": list(prompt_tokens),
                  "output_tokens": list(output_tokens), "epochs": epochs, "seed": seed,
                  "model": session.target.model,
                  "tokenizer": "local" if tokenizer_dir else "service"}  # fmt: skip
    finish(session, "static", parameters, rows, csv_path, store)


@click.command(cls=VariadicCommand, variadic=DYNAMIC_LISTS)
@click.argument("name")
@click.option(
    "--request-rate",
    multiple=True,
    required=True,
    metavar="R [R...]",
    type=click.FloatRange(0, MAX_RATE, min_open=True),
    help="requests per second (mean of Poisson arrivals); one point per rate",
)
@click.option(
    "--num-prompts",
    multiple=True,
    required=True,
    metavar="N [N...]",
    type=click.IntRange(1, MAX_PROMPTS),
    help="requests sent at each rate, paired in order with --request-rate",
)
@click.option(
    "--dataset",
    "dataset_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="the prompts",
)
@click.option(
    "--dataset-type",
    type=click.Choice(datasets.KINDS),
    default="custom",
    show_default=True,
    help="custom is what `wharf bench dataset` writes",
)
@click.option(
    "--max-prompt-tokens", type=click.IntRange(1), help="leave out dataset prompts longer than this"
)
@click.option(
    "--max-tokens",
    type=click.IntRange(1),
    help="leave out dataset entries whose prompt and output are longer than this",
)
@run_options
def dynamic(name, request_rate, num_prompts, dataset_path, dataset_type, max_prompt_tokens,
            max_tokens, tokenizer_dir, csv_path, token, seed, timeout, store) -> None:  # fmt: skip
    """Varying lengths at Poisson arrivals (ModelArts' benchmark_serving.py): for each rate,
    NUM_PROMPTS dataset prompts sent at random times averaging that rate, each asking its
    dataset output length. Example:

    wharf bench dynamic NAME --request-rate 1 2 4 --num-prompts 100 100 100
    --dataset data.json --dataset-type custom --csv out.csv"""
    if len(request_rate) != len(num_prompts):
        raise CliError("--request-rate and --num-prompts pair up in order: give as many of "
                       f"each (got {len(request_rate)} and {len(num_prompts)})", USAGE)  # fmt: skip
    try:
        entries = datasets.read_entries(Path(dataset_path), dataset_type)
    except datasets.DatasetError as exc:
        raise CliError(f"--dataset: {exc}", USAGE) from None
    session = open_session(name, token, tokenizer_dir, timeout, seed)
    say(f"dynamic: {len(entries)} usable {dataset_type} entries, {len(request_rate)} rate(s)")
    rows = []
    for rate, count in zip(request_rate, num_prompts, strict=True):
        try:
            requests = datasets.sample(entries, count, session.tokenizer, session.rng,
                                       max_prompt_tokens, max_tokens)  # fmt: skip
        except datasets.DatasetError as exc:
            raise CliError(f"--dataset: {exc}", USAGE) from None
        times = poisson_schedule(rate, count, session.rng)
        results, duration_s = run_dynamic(session.target, requests, times)
        row = {"request_rate": rate, "num_prompts": count, **summarize(results, duration_s)}
        session.record("dynamic", row, results)
        rows.append(row)
    parameters = {"request_rate": list(request_rate), "num_prompts": list(num_prompts),
                  "dataset": Path(dataset_path).name[:200], "dataset_type": dataset_type,
                  "max_prompt_tokens": max_prompt_tokens, "max_tokens": max_tokens,
                  "seed": seed, "model": session.target.model,
                  "tokenizer": "local" if tokenizer_dir else "service"}  # fmt: skip
    finish(session, "dynamic", parameters, rows, csv_path, store)


def length_options(side: str, low: int, high: int, avg: int, std: int) -> Callable:
    def apply(command: Callable) -> Callable:
        for flag, default, what in reversed([
            (f"--min-{side}", low, "shortest"), (f"--max-{side}", high, "longest"),
            (f"--avg-{side}", avg, "mean"), (f"--std-{side}", std, "standard deviation of the"),
        ]):  # fmt: skip
            kind = int if flag.startswith(("--min", "--max")) else float
            command = click.option(flag, type=kind, default=default, show_default=True,
                                   help=f"{what} {side} length, in tokens")(command)  # fmt: skip
        return command

    return apply


@click.command("dataset")
@click.option(
    "--tokenizer",
    "tokenizer_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="the model's folder (tokenizer.json)",
)
@length_options("input", 100, 3600, 1800, 500)
@length_options("output", 40, 256, 160, 30)
@click.option(
    "--num-requests",
    type=click.IntRange(1, MAX_PROMPTS),
    default=1000,
    show_default=True,
    help="entries to write",
)
@click.option(
    "-o",
    "--output",
    "--dataset",
    "output_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="the JSON file to write",
)
@click.option("--seed", type=int, default=0, show_default=True)
def dataset(tokenizer_dir, min_input, max_input, avg_input, std_input, min_output, max_output,
            avg_output, std_output, num_requests, output_file, seed) -> None:  # fmt: skip
    """Write a custom dataset (ModelArts' generate_dataset.py): input and output lengths drawn
    from normal distributions clipped to [min, max], prompts of exactly the drawn length."""
    inputs = datasets.Lengths(min_input, max_input, avg_input, std_input)
    outputs = datasets.Lengths(min_output, max_output, avg_output, std_output)
    if problems := inputs.problems("input") + outputs.problems("output"):
        raise CliError("; ".join(problems), USAGE)
    tokenizer = load_tokenizer(None, None, tokenizer_dir)
    try:
        entries = datasets.generate(tokenizer, inputs, outputs, num_requests, random.Random(seed))
    except PromptError as exc:
        raise CliError(f"--min-input {min_input}: {exc}", USAGE) from None
    lines = ",\n".join(json.dumps(entry, ensure_ascii=False) for entry in entries)
    Path(output_file).write_text(f"[\n{lines}\n]\n", encoding="utf-8")  # a JSON list, one per line
    click.echo(f"wrote {len(entries)} entries to {output_file}")


@click.command("list")
@click.argument("name")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.option("--kind", type=click.Choice(["static", "dynamic"]))
@output_option
def list_runs(name: str, limit: int, kind: str | None) -> None:
    """The benchmark runs stored for a service, newest first (-o json: with every row)."""
    runs: list[dict[str, Any]] = Client(Config.load()).get(
        f"services/{name}/benchmarks", limit=limit, kind=kind
    )
    if as_json():
        emit(runs)
    elif not runs:
        click.echo(f"no benchmark runs stored for {name}; run `wharf bench static {name}`")
    else:
        emit([run_summary(run) for run in runs], RUN_COLUMNS)
