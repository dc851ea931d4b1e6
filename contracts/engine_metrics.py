"""An engine's Prometheus text exposition (its /metrics page) read into a sample of
contracts.engine_load: the figures the gateways, the autoscaler and the console use.

vLLM 0.32 (V1) names, as captured from a real CPU engine in tests/fixtures/vllm_metrics_*.txt:
`vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`,
counters `vllm:prefix_cache_hits_total`, `vllm:prefix_cache_queries_total`,
`vllm:prompt_tokens_total`, `vllm:generation_tokens_total`, `vllm:spec_decode_num_drafts_total`,
`vllm:spec_decode_num_draft_tokens_total`, `vllm:spec_decode_num_accepted_tokens_total`, and
the histogram `vllm:time_to_first_token_seconds` (its `_sum` and `_count`). Older vLLM
releases named two of them differently (`vllm:gpu_cache_usage_perc`,
`vllm:gpu_prefix_cache_hits_total`/`_queries_total`); the V1 name wins where both appear.

SGLang 0.5 (`--enable-metrics`; names from its production-metrics page and
sglang/srt/metrics/collector.py): `sglang:num_running_reqs`, `sglang:num_queue_reqs`,
`sglang:token_usage` (the share of its KV pool's tokens in use), counters
`sglang:prompt_tokens_total`, `sglang:generation_tokens_total`, `sglang:cached_tokens_total`
(prompt tokens found in its radix cache; every prompt token is looked up, so the prompt tokens
are the queries), and the histograms `sglang:time_to_first_token_seconds` and
`sglang:inter_token_latency_seconds` (`sglang:time_per_output_token_seconds` before it). SGLang
reports speculative decoding only as a mean accept length, not as counters: no spec fields.
Both engines' inter-token latency histograms give `itl_sum`/`itl_count` (vLLM V1's
`vllm:inter_token_latency_seconds`, `vllm:time_per_output_token_seconds` before it).

Samples are matched by their own names (not their families'), so a page without `# TYPE`
lines reads the same. An engine with several label sets for one name (several data-parallel
engine indexes, several served models) is summed, except KV-cache usage, a fraction of each
engine's own cache, which is averaged.
"""

from __future__ import annotations

import math
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

from contracts.engines import Placement, render
from contracts.spec import ServiceSpec

MAX_TEXT = 4 * 1024 * 1024  # characters of a /metrics page read at most (vLLM's: ~50 KB)

# A sample field -> the sample names that give it, preferred first.
NAMES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "kv_cache": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "prefix_hits": (
        "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total",
        "sglang:cached_tokens_total",
    ),
    "prefix_queries": (
        "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total",
        "sglang:prompt_tokens_total",
    ),
    "ttft_sum": ("vllm:time_to_first_token_seconds_sum", "sglang:time_to_first_token_seconds_sum"),
    "ttft_count": (
        "vllm:time_to_first_token_seconds_count", "sglang:time_to_first_token_seconds_count",
    ),
    "itl_sum": (
        "vllm:inter_token_latency_seconds_sum", "vllm:time_per_output_token_seconds_sum",
        "sglang:inter_token_latency_seconds_sum", "sglang:time_per_output_token_seconds_sum",
    ),
    "itl_count": (
        "vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_count",
        "sglang:inter_token_latency_seconds_count", "sglang:time_per_output_token_seconds_count",
    ),
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
}  # fmt: skip
AVERAGED = frozenset({"kv_cache"})  # a fraction per engine: a sum over engines means nothing
WANTED = frozenset(name for names in NAMES.values() for name in names)
# vLLM's LoRA gauge: one label set per change of the adapters its running and waiting requests
# use, valued with the time of that change; the newest says which are in its slots now.
LORA_INFO = "vllm:lora_requests_info"
LORA_LABELS = ("running_lora_adapters", "waiting_lora_adapters")
MAX_ADAPTERS = 256


class MetricsError(ValueError):
    """The page is not Prometheus text (an HTML error page, a truncated answer)."""


def parse(text: str, at: float) -> dict[str, float]:
    """The sample a /metrics page gives, scraped at `at` (unix seconds): "at" and every field
    of contracts.engine_load.FIELDS the page reports (the others left out). Raises
    MetricsError for text that is not the Prometheus format, never anything else."""
    return read(text, at)[0]


def read(text: str, at: float) -> tuple[dict[str, float], frozenset[str] | None]:
    """parse's sample, and the LoRA adapters the engine's requests use now (vLLM's
    lora_requests_info; None for an engine that reports no LoRA), in one pass."""
    if len(text) > MAX_TEXT:
        raise MetricsError(f"the metrics page is over {MAX_TEXT} characters")
    values, adapters = _wanted_values(text)
    sample: dict[str, float] = {"at": at}
    for field, names in NAMES.items():
        found = next((values[name] for name in names if values.get(name)), None)
        if found:
            sample[field] = sum(found) / len(found) if field in AVERAGED else sum(found)
    if "prefix_hits" not in sample:  # an SGLang before cached_tokens_total: no hit rate, not 0
        sample.pop("prefix_queries", None)
    return sample, adapters


def _wanted_values(text: str) -> tuple[dict[str, list[float]], frozenset[str] | None]:
    """The finite values of the wanted samples, by sample name, one per label set; and the
    adapters of the newest LoRA label set."""
    values: dict[str, list[float]] = defaultdict(list)
    newest: tuple[float, frozenset[str]] | None = None
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in WANTED and math.isfinite(sample.value):
                    values[sample.name].append(float(sample.value))
                elif sample.name == LORA_INFO and (newest is None or sample.value > newest[0]):
                    names = ",".join(sample.labels.get(label, "") for label in LORA_LABELS)
                    used = frozenset(n for n in names.split(",") if n)
                    newest = (sample.value, frozenset(sorted(used)[:MAX_ADAPTERS]))
    except (ValueError, TypeError, IndexError, KeyError) as exc:  # the parser's ways to fail
        raise MetricsError(f"not Prometheus text: {exc}") from None
    return values, (newest[1] if newest else None)


def metrics_path(spec: ServiceSpec, role: str = "") -> str | None:
    """Where an instance of `spec` (in `role`: "prefill", "decode" or "") serves its metrics,
    as its engine adapter's plan says; None for an engine with no Prometheus page on its
    serving port (BladeLLM, PaddleNLP, a custom command)."""
    return render(spec, Placement(role=role, service=spec.name)).metrics_path
