"""SGLang's /metrics page read into the engine-load sample the scraper keeps and the autoscaler
and the gateways' kv_cache_load policy read (contracts.engine_metrics).

tests/fixtures/sglang_metrics_docs.txt is the page SGLang publishes as a real server's answer on
its production-metrics page (sgl-project/sglang docs/references/production_metrics.md, a Llama
3.1 8B server under load), the families Wharf reads and their neighbours kept as printed. It
predates `sglang:cached_tokens_total` and `sglang:inter_token_latency_seconds`, which the table
below feeds as SGLang 0.5 prints them."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import engine_load
from contracts.engine_metrics import metrics_path, parse
from contracts.spec import parse_spec
from contracts.spec_rules import METRICS_ENGINES

DOCS_PAGE = (Path(__file__).parent / "fixtures/sglang_metrics_docs.txt").read_text()
MODEL = '{model_name="qwen",engine_type="unified",tp_rank="0",pp_rank="0"}'


def test_reads_the_page_sglang_documents():
    sample = parse(DOCS_PAGE, 10.0)
    assert sample == {
        "at": 10.0, "running": 162, "waiting": 2826, "kv_cache": 0.28,
        "ttft_sum": pytest.approx(2351897.9474117756), "ttft_count": 11008,
        "itl_sum": pytest.approx(866964.5791549598), "itl_count": 7400757,
        "prompt_tokens": 8128902, "generation_tokens": 7557572,
    }  # fmt: skip


def test_a_page_without_cached_tokens_gives_no_hit_rate_rather_than_zero():
    newer, older = parse(DOCS_PAGE, 70.0), parse(DOCS_PAGE.replace("8.128902e+06", "8e+06"), 10.0)
    rates = engine_load.rates(newer, older)
    assert "prefix_hit_rate" not in rates
    assert rates["prompt_tps"] == pytest.approx(128902 / 60)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([f"sglang:num_running_reqs{MODEL} 3", f"sglang:num_queue_reqs{MODEL} 2"],
         {"running": 3, "waiting": 2}),
        # the radix cache's hits, from every cache tier, against every prompt token looked up
        (['sglang:cached_tokens_total{cache_source="device",model_name="qwen"} 600',
          'sglang:cached_tokens_total{cache_source="host",model_name="qwen"} 40',
          f"sglang:prompt_tokens_total{MODEL} 1000"],
         {"prefix_hits": 640, "prefix_queries": 1000, "prompt_tokens": 1000}),
        # the inter-token latency histogram of SGLang 0.5 wins over the older name
        ([f"sglang:inter_token_latency_seconds_sum{MODEL} 1.5",
          f"sglang:inter_token_latency_seconds_count{MODEL} 100",
          f"sglang:time_per_output_token_seconds_sum{MODEL} 9",
          f"sglang:time_per_output_token_seconds_count{MODEL} 9"],
         {"itl_sum": 1.5, "itl_count": 100}),
        # a data-parallel server's schedulers: requests summed, KV usage averaged
        (['sglang:num_running_reqs{dp_rank="0"} 4', 'sglang:num_running_reqs{dp_rank="1"} 6',
          'sglang:token_usage{dp_rank="0"} 0.2', 'sglang:token_usage{dp_rank="1"} 0.6'],
         {"running": 10, "kv_cache": pytest.approx(0.4)}),
        # a gauge with no meaning here, and the accept length (no counters): nothing
        ([f"sglang:gen_throughput{MODEL} 86.5", f"sglang:spec_accept_length{MODEL} 2.4"], {}),
    ],
    ids=["requests", "cached-tokens", "itl", "dp-ranks", "ignored"],
)  # fmt: skip
def test_reads_sglang_names(lines, expected):
    assert parse("\n".join(lines) + "\n", 1.0) == {"at": 1.0, **expected}


def test_two_sglang_samples_give_ttft_itl_and_throughput():
    def page(tokens: int, ttft: float, itl: float, count: int) -> str:
        return "\n".join([
            f"sglang:generation_tokens_total{MODEL} {tokens}",
            f"sglang:time_to_first_token_seconds_sum{MODEL} {ttft}",
            f"sglang:time_to_first_token_seconds_count{MODEL} {count}",
            f"sglang:inter_token_latency_seconds_sum{MODEL} {itl}",
            f"sglang:inter_token_latency_seconds_count{MODEL} {tokens}",
        ]) + "\n"  # fmt: skip

    rates = engine_load.rates(
        parse(page(1200, 3.0, 4.0, 20), 12.0), parse(page(200, 1.0, 2.0, 10), 2.0)
    )
    assert rates == {"ttft": pytest.approx(0.2), "itl": pytest.approx(0.002),
                     "generation_tps": pytest.approx(100.0)}  # fmt: skip


def test_an_sglang_service_is_scraped_on_its_metrics_path_and_may_scale_on_its_queue():
    spec = {"name": "s", "llm": {"engine": "sglang", "model": "m"}, "metadata": {"gpu": 1},
            "autoscaler": {"min": 1, "max": 3,
                           "scaleStrategies": [{"metricName": "queue", "threshold": 4}]},
            }  # fmt: skip
    assert metrics_path(parse_spec(spec)) == "/metrics"
    assert "sglang" in METRICS_ENGINES
    spec["metadata"]["rpc"] = {"routing": "kv_cache_load"}
    parse_spec(spec)  # the KV-cache-aware policy reads sglang:token_usage
