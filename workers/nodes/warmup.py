"""A new instance warmed up before it is routed (the spec's `warm_up_data_path`,
contracts.warmup): once its readiness first passes, the node agent reads the file as the
instance sees it (runtime.read_file), replays its requests to it through its front (with its
engine key), one at a time, and only then marks it ready. A file that cannot be read, or
requests that fail, are said in an event and do not keep the instance out of routing: a
warm-up is an optimisation, not a check. Runs in the agent's background (the instance is
busy meanwhile), within BUDGET seconds.
"""

from __future__ import annotations

import time
from collections import Counter

import httpx

from contracts import engine_tls
from contracts.warmup import MAX_BYTES, Replay, read_warm_up
from controlplane.services.choices import InstanceState
from controlplane.services.events import record
from controlplane.services.models import Instance
from workers.runtimes.base import ObservedInstance, Runtime

BUDGET = 300.0  # seconds all of an instance's replays may take
TIMEOUT = 60.0  # seconds one replayed request may take


def path_of(row: Instance) -> str | None:
    spec = row.placed_spec()
    return spec.warm_up_data_path if spec is not None else None


def default_path(row: Instance) -> str:
    """Where a bare body goes: an LLM engine's completions, else the server's root."""
    spec = row.placed_spec()
    llm = spec is not None and spec.llm is not None and not spec.containers
    return "/v1/completions" if llm else "/"


def warm_then_ready(
    row: Instance, found: ObservedInstance, runtime: Runtime, changes: dict
) -> set[str]:
    """Replay the warm-up file to `row`, then make it ready (`changes`, the readiness
    update the agent would have written), unless it left `starting` meanwhile."""
    path = path_of(row) or ""
    started = time.monotonic()
    try:
        text = runtime.read_file(row.name, path, MAX_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        reason, words = "WarmUpSkipped", f"cannot read {path}: {exc}; routed without a warm-up"
    else:
        parsed = read_warm_up(text, default_path(row))
        outcome = replay(found.url or "", row.engine_key(), parsed.requests, started + BUDGET)
        reason, words = "InstanceWarmedUp", _summary(path, outcome, parsed, started)
    if not Instance.objects.filter(pk=row.pk, state=InstanceState.STARTING).update(**changes):
        return set()
    record(row.service, reason, words, row.name)
    record(row.service, "InstanceReady", f"readiness check passed at {row.url}", row.name)
    return {row.service.name}


def replay(url: str, key: str, requests: list[Replay], deadline: float) -> Counter:
    """Each request in turn until `deadline` (time.monotonic); how they ended: "2xx", "4xx",
    "5xx", "error" (no answer), "not sent" (past the deadline)."""
    outcome: Counter = Counter()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=url, headers=headers, trust_env=False,
                      verify=engine_tls.client_context()) as client:  # fmt: skip
        for i, request in enumerate(requests):
            left = deadline - time.monotonic()
            if left <= 0:
                outcome["not sent"] += len(requests) - i
                break
            try:
                answer = client.request(
                    request.method, request.path, timeout=min(TIMEOUT, left),
                    json=request.body if request.body is not None else None,
                )  # fmt: skip
                outcome[f"{answer.status_code // 100}xx"] += 1
            except httpx.HTTPError:
                outcome["error"] += 1
    return outcome


def _summary(path: str, outcome: Counter, parsed, started: float) -> str:
    sent = sum(n for kind, n in outcome.items() if kind != "not sent")
    parts = [f"{n} {kind}" for kind, n in sorted(outcome.items())]
    words = (f"replayed {sent} requests from {path} in {time.monotonic() - started:.1f} s"
             + (f": {', '.join(parts)}" if parts else ""))  # fmt: skip
    if parsed.unreadable:
        words += f"; {parsed.unreadable} lines were no request"
    if parsed.cut:
        words += f"; only the first {len(parsed.requests)} were replayed"
    return words
