"""Reading an engine's /metrics page into a sample (contracts.engine_metrics): the pages a real
vLLM 0.32 CPU engine served (tests/fixtures/vllm_metrics_*.txt, captured after six completions
of two prompts with prefix caching on, the second with a draft model), older vLLM names, label
sets summed, and text that is not Prometheus'."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from contracts import engine_load
from contracts.engine_metrics import NAMES, MetricsError, metrics_path, parse, read
from contracts.spec import parse_spec

ROOT = Path(__file__).parents[1]
FIXTURES = ROOT / "tests/fixtures"
PREFIX_PAGE = (FIXTURES / "vllm_metrics_prefix_cache.txt").read_text()
SPEC_PAGE = (FIXTURES / "vllm_metrics_spec_decode.txt").read_text()
LABELS = '{engine="0",model_name="tiny"}'


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        (PREFIX_PAGE, {"running": 0, "waiting": 0, "kv_cache": 0, "prefix_hits": 640,
                       "prefix_queries": 873, "ttft_count": 6, "itl_count": 90,
                       "prompt_tokens": 873, "generation_tokens": 96}),
        (SPEC_PAGE, {"running": 0, "waiting": 0, "kv_cache": 0, "prefix_hits": 640,
                     "prefix_queries": 873, "ttft_count": 6, "itl_count": 90,
                     "prompt_tokens": 873, "generation_tokens": 96, "spec_drafts": 90,
                     "spec_draft_tokens": 270, "spec_accepted_tokens": 0}),
    ],
    ids=["prefix-cache", "spec-decode"],
)  # fmt: skip
def test_reads_a_real_vllm_page(page, expected):
    sample = parse(page, 1700000000.0)
    assert sample["at"] == 1700000000.0
    assert {k: v for k, v in sample.items() if k not in ("at", "ttft_sum", "itl_sum")} == expected
    assert 0 < sample["ttft_sum"] < 60  # six first tokens of a tiny model on CPU
    assert 0 < sample["itl_sum"] < 60  # and their other tokens


def test_a_real_page_without_spec_decoding_has_no_spec_fields():
    assert not {"spec_drafts", "spec_draft_tokens", "spec_accepted_tokens"} & set(
        parse(PREFIX_PAGE, 0.0)
    )


def test_every_field_of_the_contract_has_names():
    assert set(NAMES) == set(engine_load.FIELDS)


def test_the_sample_round_trips_through_the_contract():
    sample = parse(SPEC_PAGE, 5.0)
    assert engine_load.decode(engine_load.encode(sample)) == sample


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        # several engine indexes (data parallel) and served models: counts summed
        ([f'vllm:num_requests_running{{engine="{i}"}} {i + 1}' for i in range(3)],
         {"running": 6}),
        (['vllm:prefix_cache_hits_total{model_name="a"} 10',
          'vllm:prefix_cache_hits_total{model_name="b"} 5'], {"prefix_hits": 15}),
        # KV-cache usage is each engine's fraction: averaged, never over 1
        (['vllm:kv_cache_usage_perc{engine="0"} 0.5', 'vllm:kv_cache_usage_perc{engine="1"} 1'],
         {"kv_cache": 0.75}),
        # older vLLM names
        (["vllm:gpu_cache_usage_perc 0.25"], {"kv_cache": 0.25}),
        (["vllm:gpu_prefix_cache_hits_total 3", "vllm:gpu_prefix_cache_queries_total 4"],
         {"prefix_hits": 3, "prefix_queries": 4}),
        # the V1 name wins when an engine shows both (hidden deprecated metrics turned on)
        (["vllm:gpu_cache_usage_perc 0.9", "vllm:kv_cache_usage_perc 0.1"], {"kv_cache": 0.1}),
        # the histogram's _sum and _count, not its buckets
        (['vllm:time_to_first_token_seconds_bucket{le="+Inf"} 4',
          "vllm:time_to_first_token_seconds_sum 2.0",
          "vllm:time_to_first_token_seconds_count 4"], {"ttft_sum": 2.0, "ttft_count": 4}),
        # a counter's _created is not its value; NaN and infinities are not values
        (["vllm:generation_tokens_created 1.7e9", "vllm:generation_tokens_total 7"],
         {"generation_tokens": 7}),
        (["vllm:num_requests_waiting NaN", "vllm:num_requests_running +Inf"], {}),
        # another engine's page, or none of vLLM's names: only the time
        (["tgi_queue_size 3", "process_open_fds 12"], {}),
        ([], {}),
    ],
    ids=["engines-summed", "models-summed", "kv-averaged", "old-kv-name", "old-prefix-names",
         "v1-name-wins", "ttft-histogram", "created-ignored", "not-finite", "other-engine",
         "empty"],
)  # fmt: skip
def test_reads_labelled_and_older_pages(lines, expected):
    assert parse("\n".join(lines) + "\n", 3.0) == {"at": 3.0, **expected}


def test_the_adapters_in_use_are_the_newest_lora_label_sets():
    lines = [
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="",'
        'waiting_lora_adapters=""} 1.7e9',
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql,chat",'
        'waiting_lora_adapters="extra"} 1.8e9',
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",'
        'waiting_lora_adapters=""} 1.75e9',
        "vllm:num_requests_running 2",
    ]
    sample, adapters = read("\n".join(lines) + "\n", 3.0)
    assert sample == {"at": 3.0, "running": 2} and adapters == {"sql", "chat", "extra"}
    idle = read('vllm:lora_requests_info{running_lora_adapters="",waiting_lora_adapters=""} 1\n',
                0.0)  # fmt: skip
    assert idle[1] == frozenset()  # LoRA on, nothing in use
    assert read("vllm:num_requests_running 1\n", 0.0)[1] is None  # no LoRA at all


def test_reads_a_page_with_type_lines_as_one_without():
    typed = '# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{engine="0"} 12\n'
    untyped = typed.split("\n", 1)[1]
    assert parse(typed, 0.0) == parse(untyped, 0.0) == {"at": 0.0, "prompt_tokens": 12}


@pytest.mark.parametrize(
    "text",
    ["<html><body>502 Bad Gateway</body></html>", "vllm:num_requests_running{engine=0} 1",
     "vllm:num_requests_running{engine=\"0\"}", "not a metric at all", "\x00\x01\x02",
     json.dumps({"running": 1}), PREFIX_PAGE[: PREFIX_PAGE.index(LABELS) + 10]],
    ids=["html", "unquoted-label", "no-value", "words", "binary", "json", "truncated"],
)  # fmt: skip
def test_text_that_is_not_prometheus_is_a_clear_error(text):
    with pytest.raises(MetricsError, match="not Prometheus text"):
        parse(text, 0.0)


def test_a_huge_page_is_refused_before_it_is_parsed():
    with pytest.raises(MetricsError, match="over"):
        parse("vllm:num_requests_running 1\n" * 200_000, 0.0)


@pytest.mark.parametrize(
    ("spec", "role", "path"),
    [
        ({"name": "a", "llm": {"engine": "vllm-cpu", "model": "tiny"}}, "", "/metrics"),
        ({"name": "a", "llm": {"engine": "tgi", "model": "tiny"}, "metadata": {"gpu": 1}}, "",
         "/metrics"),
        ({"name": "a", "llm": {"engine": "bladellm", "model": "tiny"}, "metadata": {"gpu": 1}},
         "", None),
        ({"name": "a", "containers": [{"image": "x", "command": "serve", "port": 8000}]}, "",
         None),
    ],
    ids=["vllm", "tgi", "bladellm", "custom"],
)  # fmt: skip
def test_the_metrics_path_is_the_engine_adapters(spec, role, path):
    assert metrics_path(parse_spec(spec), role) == path


def test_a_prefill_instance_has_the_engines_metrics_path():
    spec = json.loads((ROOT / "deploy_specs/pd-vllm-cpu-1p1d.json").read_text())
    assert metrics_path(parse_spec(spec), "prefill") == "/metrics"


DASHBOARD = ROOT / "deploy/grafana/wharf-engines.json"
SD_LABELS = {"wharf_service", "wharf_instance", "wharf_role", "wharf_node", "wharf_workspace"}


def _queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    return [t["expr"] for p in panels for t in p["targets"]]


def test_the_dashboard_reads_only_names_a_real_vllm_serves():
    served = {line.split("{")[0].split(" ")[0] for page in (PREFIX_PAGE, SPEC_PAGE)
              for line in page.splitlines() if line.startswith("vllm:")}  # fmt: skip
    used = {name for q in _queries() for name in re.findall(r"vllm:[a-z_:]+", q)}
    assert len(used) >= 10
    assert used <= served, used - served


def test_the_dashboard_groups_by_the_discovery_labels_and_defines_its_variables():
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    for query in _queries():
        for labels in re.findall(r"by \(([^)]*)\)", query):
            assert {label.strip() for label in labels.split(",")} <= SD_LABELS | {"le"}, query
        assert set(re.findall(r"\$(\w+)", query)) - {"__rate_interval"} <= variables, query
        assert 'wharf_service=~"$service"' in query, query
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
