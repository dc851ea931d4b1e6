"""The figures of one benchmark point, from the requests it sent: pure arithmetic.

The names are the contract with the API (controlplane/benchmarks/validation.py takes the same
ones; a test holds the two lists equal) and with the console's chart. Times are in
milliseconds, throughputs per second of the point's wall-clock duration.

- latency: from sending a request to its last byte;
- TTFT (time to first token): from sending to the first streamed token;
- TPOT (time per output token): (latency - TTFT) / (output tokens - 1), as vLLM's
  benchmark_serving counts it; undefined for a one-token output;
- token_mismatches: requests whose token counts, as the engine reported them (usage), differ
  from the ones asked: the prompt's length or max_tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

POINT_FIELDS = {
    "static": ("parallel_num", "prompt_tokens", "output_tokens"),
    "dynamic": ("request_rate", "num_prompts"),
}
COUNT_FIGURES = ("requests", "failed", "token_mismatches")
RATE_FIGURES = ("duration_s", "request_throughput", "output_throughput", "total_throughput")
STATS = ("avg", "p50", "p90", "p99")
TIMINGS = ("latency_ms", "ttft_ms", "tpot_ms")
TIMING_FIGURES = tuple(f"{what}_{stat}" for what in TIMINGS for stat in STATS)
FIGURES = (*COUNT_FIGURES, *RATE_FIGURES, "mean_prompt_tokens", "mean_output_tokens",
           *TIMING_FIGURES)  # fmt: skip

Figures = dict[str, float | int | None]


@dataclass(frozen=True)
class RequestResult:
    """One request as the load runner saw it. Token counts are the engine's (usage), None
    when the answer carried none."""

    asked_prompt_tokens: int
    asked_output_tokens: int
    ok: bool
    latency_s: float
    ttft_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    error: str = ""

    @property
    def mismatched(self) -> bool:
        return self.ok and (
            self.prompt_tokens != self.asked_prompt_tokens
            or self.output_tokens != self.asked_output_tokens
        )

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), interpolated linearly between the closest ranks (numpy's
    default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 2)


def timing_figures(name: str, seconds: Sequence[float]) -> Figures:
    """avg, p50, p90 and p99 of `seconds`, in ms, named `<name>_<stat>`."""
    average = sum(seconds) / len(seconds) if seconds else None
    figures: Figures = {f"{name}_avg": _ms(average)}
    for q in (50, 90, 99):
        figures[f"{name}_p{q}"] = _ms(percentile(seconds, q))
    return figures


def _mean(values: Sequence[int]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


def summarize(results: Sequence[RequestResult], duration_s: float) -> Figures:
    """Every figure of FIGURES for one point: `results` of its requests, sent within
    `duration_s` seconds of wall-clock time."""
    done = [r for r in results if r.ok]
    prompt = [r.prompt_tokens if r.prompt_tokens is not None else r.asked_prompt_tokens
              for r in done]  # fmt: skip
    output = [r.output_tokens or 0 for r in done]
    per_second = 1 / duration_s if duration_s > 0 else 0.0
    figures: Figures = {
        "requests": len(results),
        "failed": len(results) - len(done),
        "token_mismatches": sum(r.mismatched for r in done),
        "duration_s": round(duration_s, 3),
        "request_throughput": round(len(done) * per_second, 3),
        "output_throughput": round(sum(output) * per_second, 3),
        "total_throughput": round((sum(output) + sum(prompt)) * per_second, 3),
        "mean_prompt_tokens": _mean(prompt),
        "mean_output_tokens": _mean(output),
    }
    figures |= timing_figures("latency_ms", [r.latency_s for r in done])
    figures |= timing_figures("ttft_ms", [r.ttft_s for r in done if r.ttft_s is not None])
    figures |= timing_figures("tpot_ms", [t for r in done if (t := r.tpot_s) is not None])
    return figures
