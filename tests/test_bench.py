"""`wharf bench`'s pure logic: percentiles and figures, Poisson arrivals, dataset lengths and
readers, exact-length prompts on the tiny model's real tokenizer, the SSE reader, the options
that take several values, and the contract of a run's figures with the API."""

from __future__ import annotations

import json
import math
import random
import statistics

import numpy as np
import pytest
from click.testing import CliRunner
from tokenizers import Tokenizer

from controlplane.benchmarks import validation
from controlplane.services.tiny_model import write_tiny_model
from wharfcli.bench import datasets, results, stats
from wharfcli.bench.arrivals import poisson_schedule
from wharfcli.bench.prompts import PromptError, PromptTokenizer
from wharfcli.bench.runner import _Stream
from wharfcli.bench.variadic import spread
from wharfcli.main import cli


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("bench-model") / "tiny-llama")


@pytest.fixture(scope="module")
def tokenizer(model):
    return PromptTokenizer.from_dir(model)


# ---- statistics ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 50, None),
        ([7.0], 99, 7.0),
        ([1, 2, 3, 4], 50, 2.5),
        ([1, 2, 3, 4], 90, 3.7),
        ([4, 1, 3, 2], 0, 1),
        ([4, 1, 3, 2], 100, 4),
        ([10, 20], 99, 19.9),
    ],
)
def test_percentile_interpolates_between_the_closest_ranks(values, q, expected):
    assert stats.percentile(values, q) == pytest.approx(expected)


def test_percentile_agrees_with_numpy_on_random_samples():
    rng = random.Random(3)
    for size in (2, 5, 17, 100):
        values = [rng.expovariate(1.0) for _ in range(size)]
        for q in (50, 90, 99):
            assert stats.percentile(values, q) == pytest.approx(np.percentile(values, q))


def result(latency=1.0, ttft=0.2, out=5, prompt=10, asked_out=5, asked_prompt=10, ok=True):
    return stats.RequestResult(asked_prompt, asked_out, ok, latency, ttft if ok else None,
                               prompt if ok else None, out if ok else None,
                               "" if ok else "HTTP 429: too many")  # fmt: skip


def test_summary_counts_throughput_over_the_duration_and_leaves_failures_out():
    figures = stats.summarize(
        [result(), result(latency=2.0, ttft=0.4), result(ok=False)], duration_s=2.0
    )
    assert (figures["requests"], figures["failed"], figures["token_mismatches"]) == (3, 1, 0)
    assert figures["request_throughput"] == 1.0  # 2 done in 2 s
    assert figures["output_throughput"] == 5.0  # 10 tokens in 2 s
    assert figures["total_throughput"] == 15.0  # and 20 prompt tokens
    assert (figures["latency_ms_avg"], figures["ttft_ms_p50"]) == (1500.0, 300.0)
    # TPOT: (latency - TTFT) / (5 - 1): 200 ms and 400 ms
    assert (figures["tpot_ms_avg"], figures["tpot_ms_p99"]) == (300.0, 398.0)
    assert set(figures) == set(stats.FIGURES)


def test_summary_counts_answers_whose_token_counts_are_not_the_asked_ones():
    figures = stats.summarize([result(prompt=11), result(out=4), result()], duration_s=1.0)
    assert figures["token_mismatches"] == 2
    assert figures["mean_prompt_tokens"] == pytest.approx(31 / 3, abs=0.01)


def test_summary_of_only_failures_has_no_timings_and_no_tpot_for_one_token_outputs():
    failed = stats.summarize([result(ok=False)], duration_s=1.0)
    assert failed["latency_ms_p50"] is None and failed["request_throughput"] == 0
    single = stats.summarize([result(out=1, asked_out=1)], duration_s=1.0)
    assert single["tpot_ms_avg"] is None and single["ttft_ms_avg"] == 200.0


def test_the_cli_writes_exactly_the_figures_the_api_takes():
    assert stats.FIGURES == validation.FIGURES
    assert stats.POINT_FIELDS == validation.POINT_FIELDS


def test_csv_has_a_header_and_a_row_per_point_with_empty_cells_for_no_figure(tmp_path):
    rows = [{"request_rate": r, "num_prompts": 3, **stats.summarize([result()], 1.0)}
            for r in (1.0, 2.0)]  # fmt: skip
    rows[1]["ttft_ms_p50"] = None
    path = tmp_path / "out.csv"
    results.write_csv(path, "dynamic", rows)
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    assert header == ["request_rate", "num_prompts", *stats.FIGURES] and len(lines) == 3
    assert lines[2].split(",")[header.index("ttft_ms_p50")] == ""


# ---- arrivals --------------------------------------------------------------------------------


def test_poisson_schedule_is_seeded_starts_at_once_and_never_goes_back():
    first = poisson_schedule(4.0, 50, random.Random(7))
    assert first == poisson_schedule(4.0, 50, random.Random(7))
    assert first != poisson_schedule(4.0, 50, random.Random(8))
    assert first[0] == 0 and all(a <= b for a, b in zip(first, first[1:], strict=False))


@pytest.mark.parametrize("rate", [0.5, 2.0, 50.0])
def test_poisson_gaps_average_one_over_the_rate_and_spread_like_an_exponential(rate):
    times = poisson_schedule(rate, 20_001, random.Random(1))
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert statistics.fmean(gaps) == pytest.approx(1 / rate, rel=0.03)
    assert statistics.stdev(gaps) == pytest.approx(1 / rate, rel=0.05)  # exponential: sd = mean


@pytest.mark.parametrize(("rate", "count"), [(0, 3), (-1, 3), (1, -1)])
def test_poisson_schedule_refuses_a_rate_of_zero_or_less(rate, count):
    with pytest.raises(ValueError):
        poisson_schedule(rate, count, random.Random(0))


# ---- dataset lengths -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("low", "high", "avg", "std"),
    [(100, 3600, 1800, 500), (40, 256, 160, 30), (10, 12, 500, 100), (5, 5, 5, 0), (1, 9, 0, 50)],
)
def test_drawn_lengths_stay_within_min_and_max(low, high, avg, std):
    draws = datasets.Lengths(low, high, avg, std).draw(2000, random.Random(0))
    assert min(draws) >= low and max(draws) <= high


def test_drawn_lengths_follow_the_normal_distribution_when_the_bounds_are_wide():
    draws = datasets.Lengths(1, 100_000, 1800, 500).draw(20_000, random.Random(2))
    assert statistics.fmean(draws) == pytest.approx(1800, rel=0.01)
    assert statistics.stdev(draws) == pytest.approx(500, rel=0.03)


def test_drawn_lengths_are_seeded():
    lengths = datasets.Lengths(1, 100, 50, 20)
    assert lengths.draw(50, random.Random(5)) == lengths.draw(50, random.Random(5))
    assert lengths.draw(50, random.Random(5)) != lengths.draw(50, random.Random(6))


@pytest.mark.parametrize(
    ("lengths", "problem"),
    [
        (datasets.Lengths(0, 10, 5, 1), "--min-input must be at least 1"),
        (datasets.Lengths(10, 5, 5, 1), "--max-input must be at least --min-input"),
        (datasets.Lengths(1, 10, 5, -1), "--std-input must be a number of 0 or more"),
        (datasets.Lengths(1, 10, math.nan, 1), "--avg-input must be a number"),
    ],
)
def test_bad_length_options_are_named(lengths, problem):
    assert lengths.problems("input") == [problem]


# ---- exact-length prompts --------------------------------------------------------------------


def test_the_tiny_model_adds_one_bos_to_a_prompt(tokenizer):
    assert tokenizer.special == 1


@pytest.mark.parametrize("tokens", [2, 3, 7, 32, 64, 129, 500, 2047])
def test_prompts_have_exactly_the_asked_token_count(tokenizer, model, tokens):
    raw = Tokenizer.from_file(str(model / "tokenizer.json"))  # counted as the engine does
    rng = random.Random(tokens)
    for _ in range(5):
        prompt = tokenizer.exact_prompt(tokens, rng)
        assert len(raw.encode(prompt, add_special_tokens=True).ids) == tokens


def test_prompts_differ_so_a_prefix_cache_cannot_answer_one_with_another(tokenizer):
    rng = random.Random(0)
    prompts = [tokenizer.exact_prompt(64, rng) for _ in range(20)]
    assert len({prompt[:20] for prompt in prompts}) == 20


def test_a_prompt_with_no_room_for_text_is_refused(tokenizer):
    with pytest.raises(PromptError, match="adds 1 special token"):
        tokenizer.exact_prompt(1, random.Random(0))


def _copy_model(model, tmp_path, config_changes=None, drop_post_processor=False):
    folder = tmp_path / "model"
    folder.mkdir()
    data = json.loads((model / "tokenizer.json").read_text())
    if drop_post_processor:
        data["post_processor"] = None
    (folder / "tokenizer.json").write_text(json.dumps(data))
    config = json.loads((model / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, **(config_changes or {})}))
    return folder


@pytest.mark.parametrize(
    ("changes", "drop", "special"),
    [
        ({}, False, 1),
        ({"add_bos_token": False}, False, 0),  # transformers leaves BOS out
        ({"add_bos_token": True}, True, 1),  # transformers adds what the file does not
        ({}, True, 0),
        ({"add_bos_token": True, "bos_token": {"content": "<|begin_of_text|>"}}, True, 1),
    ],
)
def test_tokenizer_config_add_bos_token_is_counted(model, tmp_path, changes, drop, special):
    folder = _copy_model(model, tmp_path, changes, drop)
    assert PromptTokenizer.from_dir(folder).special == special


def test_a_folder_without_tokenizer_json_is_named(tmp_path):
    with pytest.raises(PromptError, match="has no tokenizer.json"):
        PromptTokenizer.from_dir(tmp_path)


def test_a_correction_found_against_the_engine_moves_every_count(tokenizer):
    adjusted = tokenizer.adjusted(1)
    prompt = adjusted.exact_prompt(40, random.Random(0))
    assert adjusted.count(prompt) == 40 and tokenizer.count(prompt) == 39


# ---- datasets --------------------------------------------------------------------------------


def test_generated_entries_have_prompts_of_their_drawn_length(tokenizer):
    inputs, outputs = datasets.Lengths(10, 100, 50, 30), datasets.Lengths(4, 16, 8, 4)
    entries = datasets.generate(tokenizer, inputs, outputs, 100, random.Random(0))
    assert len(entries) == 100
    for entry in entries:
        assert tokenizer.count(entry["prompt"]) == entry["prompt_tokens"]
        assert 10 <= entry["prompt_tokens"] <= 100 and 4 <= entry["output_tokens"] <= 16
    again = datasets.generate(tokenizer, inputs, outputs, 100, random.Random(0))
    assert again == entries


def write(path, data, lines=False):
    text = "\n".join(json.dumps(r) for r in data) if lines else json.dumps(data)
    path.write_text(text)
    return path


SHAREGPT = [
    {"id": "a", "conversations": [{"from": "human", "value": "Hello there"},
                                  {"from": "gpt", "value": "General Kenobi, you are bold"}]},
    {"id": "b", "conversations": [{"from": "human", "value": "only one turn"}]},
    {"id": "c", "conversations": [{"from": "human", "value": ""}, {"from": "gpt", "value": "x"}]},
    {"id": "d", "conversations": "not a list"},
]  # fmt: skip
ALPACA = [
    {"instruction": "Give three tips.", "input": "", "output": "Eat, sleep, move."},
    {"instruction": "Translate", "input": "bonjour", "output": "hello"},
    {"instruction": "No answer", "input": "", "output": ""},
]


@pytest.mark.parametrize("lines", [False, True])
def test_sharegpt_takes_the_first_turn_as_prompt_and_the_reply_as_output(tmp_path, lines):
    entries = datasets.read_entries(write(tmp_path / "s.json", SHAREGPT, lines), "sharegpt")
    assert entries == [datasets.Entry("Hello there", output_text="General Kenobi, you are bold")]


def test_alpaca_joins_instruction_and_input(tmp_path):
    entries = datasets.read_entries(write(tmp_path / "a.json", ALPACA), "alpaca")
    assert [e.prompt for e in entries] == ["Give three tips.", "Translate\n\nbonjour"]


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([{"prompt": "hi", "output_tokens": 4}, {"prompt": 3, "output_tokens": 4}], "entry 1"),
        ([{"prompt": "hi", "output_tokens": 0}], "output_tokens must be"),
        ([{"prompt": "hi", "output_tokens": True}], "output_tokens must be"),
        ([], "no usable custom entries"),
    ],
)
def test_a_bad_custom_entry_is_named(tmp_path, records, message):
    with pytest.raises(datasets.DatasetError, match=message):
        datasets.read_entries(write(tmp_path / "c.json", records), "custom")


def test_a_file_that_is_not_json_is_refused_with_its_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"prompt": "a", "output_tokens": 1}\nnot json\n')
    with pytest.raises(datasets.DatasetError, match="line 2"):
        datasets.read_entries(path, "custom")


def test_sampling_counts_with_the_tokenizer_and_leaves_out_what_is_too_long(tokenizer):
    entries = [datasets.Entry("a " * n, output_tokens=5) for n in (3, 30, 300)]
    picked = datasets.sample(entries, 4, tokenizer, random.Random(0), max_prompt_tokens=100)
    assert len(picked) == 4 and all(r.prompt_tokens <= 100 for r in picked)
    assert {r.prompt for r in picked} == {"a " * 3, "a " * 30}  # used again from the start
    assert all(r.prompt_tokens == tokenizer.count(r.prompt) for r in picked)
    with pytest.raises(datasets.DatasetError, match="fits"):
        datasets.sample(entries, 2, tokenizer, random.Random(0), max_tokens=4)


def test_sampling_asks_the_reference_replys_length_and_is_seeded(tokenizer, tmp_path):
    entries = datasets.read_entries(write(tmp_path / "a.json", ALPACA), "alpaca")
    picked = datasets.sample(entries, 2, tokenizer, random.Random(1))
    assert {r.output_tokens for r in picked} == {
        tokenizer.text_tokens("Eat, sleep, move."),
        tokenizer.text_tokens("hello"),
    }
    assert picked == datasets.sample(entries, 2, tokenizer, random.Random(1))


# ---- the stream, the options -----------------------------------------------------------------


def test_the_stream_reader_times_the_first_token_and_keeps_the_engines_usage():
    stream = _Stream()
    usage = {"prompt_tokens": 32, "completion_tokens": 2}
    last = json.dumps({"choices": [], "usage": usage})
    lines = [": comment", "", 'data: {"choices": [{"text": "a"}]}',
             'data: {"choices": [{"text": "b"}]}', f"data: {last}"]  # fmt: skip
    for at, line in enumerate(lines):
        assert stream.take(line, float(at))
    assert (stream.ttft_s, stream.chunks, stream.usage) == (2.0, 2, usage)
    assert not stream.take("data: [DONE]", 9.0)
    with pytest.raises(ValueError, match="error"):
        stream.take('data: {"error": {"message": "boom"}}', 9.0)


FLAGS = ("--parallel-num", "--prompt-tokens")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["svc", "--parallel-num", "1", "4", "8"],
         ["svc", "--parallel-num", "1", "--parallel-num", "4", "--parallel-num", "8"]),
        (["--parallel-num", "1", "2", "svc", "--epochs", "1"],
         ["--parallel-num", "1", "--parallel-num", "2", "svc", "--epochs", "1"]),
        (["--prompt-tokens", "32", "64", "--parallel-num", "2"],
         ["--prompt-tokens", "32", "--prompt-tokens", "64", "--parallel-num", "2"]),
        (["--epochs", "1", "2"], ["--epochs", "1", "2"]),
        (["--parallel-num"], ["--parallel-num"]),
        (["--", "--parallel-num", "1", "2"], ["--", "--parallel-num", "1", "2"]),
    ],
)  # fmt: skip
def test_list_options_take_every_number_after_the_flag(args, expected):
    assert spread(args, FLAGS) == expected


def test_length_pairs_of_different_counts_are_a_usage_error_before_any_call(tmp_path):
    runner = CliRunner()
    env = {"WHARF_CONFIG_DIR": str(tmp_path), "WHARF_API": "http://127.0.0.1:9"}
    answer = runner.invoke(cli, ["bench", "static", "svc", "--prompt-tokens", "32", "64",
                                 "--output-tokens", "8"], env=env)  # fmt: skip
    assert answer.exit_code == 2 and "pair up" in answer.output


def test_the_dataset_command_writes_a_custom_dataset(model, tmp_path):
    out = tmp_path / "custom.json"
    answer = CliRunner().invoke(cli, [
        "bench", "dataset", "--tokenizer", str(model), "--min-input", "20", "--max-input", "80",
        "--avg-input", "50", "--std-input", "15", "--min-output", "4", "--max-output", "8",
        "--avg-output", "6", "--std-output", "2", "--num-requests", "30", "-o", str(out),
    ])  # fmt: skip
    assert answer.exit_code == 0, answer.output
    entries = datasets.read_entries(out, "custom")
    assert len(entries) == 30 and all(4 <= e.output_tokens <= 8 for e in entries)  # type: ignore[operator]
    tokenizer = PromptTokenizer.from_dir(model)
    assert all(20 <= tokenizer.count(e.prompt) <= 80 for e in entries)
