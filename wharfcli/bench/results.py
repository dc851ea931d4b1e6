"""A benchmark's results for people (a table per point), for spreadsheets (CSV, one row per
point, ModelArts' --benchmark-csv) and for the API (one run with its rows)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wharfcli.bench.stats import FIGURES, POINT_FIELDS, STATS, TIMINGS, Figures
from wharfcli.output import Column, cell, table

TIMING_LABELS = {"latency_ms": "latency", "ttft_ms": "TTFT", "tpot_ms": "TPOT"}
POINT_LABELS = {"parallel_num": "parallel", "prompt_tokens": "prompt", "output_tokens": "output",
                "request_rate": "rate", "num_prompts": "prompts"}  # fmt: skip


def columns(kind: str) -> tuple[str, ...]:
    """The CSV's header: the point's fields, then every figure."""
    return (*POINT_FIELDS[kind], *FIGURES)


def write_csv(path: Path, kind: str, rows: Sequence[Figures]) -> None:
    """One row per point; a figure that could not be measured is an empty cell."""
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, fieldnames=columns(kind))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row[k] for k in columns(kind)})


def point_title(kind: str, row: Figures) -> str:
    point = ", ".join(f"{POINT_LABELS[k]} {cell(row[k])}" for k in POINT_FIELDS[kind])
    return f"{point}: {row['requests']} requests, {row['failed']} failed, in {row['duration_s']} s"


def point_report(kind: str, row: Figures) -> str:
    """A few lines for one point: counts, throughput, and the timings' percentiles."""
    lines = [
        point_title(kind, row),
        f"  {row['request_throughput']} requests/s, {row['output_throughput']} output tokens/s, "
        f"{row['total_throughput']} tokens/s in all",
    ]
    if row["token_mismatches"]:
        lines.append(f"  ! {row['token_mismatches']} answers' token counts (the engine's) differ "
                     "from the ones asked")  # fmt: skip
    timings = [{"ms": TIMING_LABELS[what], **{s: row[f"{what}_{s}"] for s in STATS}}
               for what in TIMINGS]  # fmt: skip
    grid = table(timings, [("ms", "ms"), *((s, s) for s in STATS)])
    lines += ["  " + line for line in grid.splitlines()]
    return "\n".join(lines)


def _best(rows: list[dict[str, Any]], key: str, pick=max) -> Any:
    values = [row.get(key) for row in rows if isinstance(row.get(key), int | float)]
    return pick(values) if values else None


def run_summary(run: dict[str, Any]) -> dict[str, Any]:
    """A stored run as one line of `wharf bench list`."""
    rows = run.get("rows") or []
    points = POINT_FIELDS.get(run.get("kind", ""), ())
    axis = points[0] if points else ""
    return {
        "id": run.get("id"), "kind": run.get("kind"), "created_at": run.get("created_at"),
        "created_by": run.get("created_by"), "points": len(rows),
        axis or "axis": sorted({row.get(axis) for row in rows if row.get(axis) is not None}),
        "best_output_throughput": _best(rows, "output_throughput"),
        "best_ttft_ms_p50": _best(rows, "ttft_ms_p50", min),
    }  # fmt: skip


RUN_COLUMNS: list[Column] = [
    ("ID", "id"), ("KIND", "kind"), ("CREATED", "created_at"), ("BY", "created_by"),
    ("POINTS", "points"),
    ("CONCURRENCY/RATE", lambda r: r.get("parallel_num") or r.get("request_rate")),
    ("BEST OUT TOK/S", "best_output_throughput"), ("BEST TTFT P50 MS", "best_ttft_ms_p50"),
]  # fmt: skip
