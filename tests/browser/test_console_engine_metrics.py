"""The Engine table of a service's Monitoring tab, in Chromium: each instance's figures from the
samples the nodes' scrapers keep in Redis (written here as a scraper writes them), a sparkline
per figure, refreshed every few seconds; an instance with no sample says why. Only the console
and its API run here (Django's live server on the test database), as in
test_console_workspaces."""

from __future__ import annotations

import os
import time

import pytest
import redis
from django.contrib.auth import get_user_model

from contracts import engine_load
from contracts.spec import parse_spec
from controlplane.queues import store as queue_store
from controlplane.services.models import Instance, Service
from tests.api_support import default_workspace, member
from tests.browser.chromium import require_browser, signed_in
from workers.scaling.scraper import write

PASSWORD = "engine-metrics-test-password"
SPEC = {"name": "tiny", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}
NAMES = ("tiny-0", "tiny-1")
SHOTS = os.environ.get("WHARF_TEST_SCREENSHOTS")  # a folder: the table as a PNG there


@pytest.fixture
def store(settings, redis_url):
    settings.REDIS_URL = redis_url  # the live server runs in this process
    client = redis.Redis.from_url(redis_url)
    keys = [k for n in NAMES for k in (engine_load.latest_key(n), engine_load.series_key(n))]
    client.delete(*keys)
    yield client
    client.delete(*keys)


@pytest.fixture
def page(live_server, transactional_db, store, monkeypatch):
    require_browser()
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # as test_versions explains
    member(get_user_model().objects.create_user("watcher", password=PASSWORD), "viewer")
    service = Service.objects.create(workspace=default_workspace(), name="tiny", spec=SPEC)
    for name, state in (("tiny-0", "ready"), ("tiny-1", "starting")):
        Instance.objects.create(
            service=service, name=name, runtime="process", node="n1", state=state,
            url="http://127.0.0.1:1", spec_hash=parse_spec(SPEC).spec_hash(),
        )  # fmt: skip
    with signed_in(live_server.url, "watcher", PASSWORD) as page:
        yield page


def _scraped(store, now: float, running: float = 2) -> None:
    """Two minutes of a scraper's samples: 10 generated tokens/s, half the prefix-cache
    queries hit, 0.25 s to first token, the KV cache half full at the end."""
    for t in range(-120, 1, 2):
        n = 120 + t
        write(store, "tiny-0", {
            "at": now + t, "running": running, "waiting": 1, "kv_cache": n / 240,
            "prefix_hits": 5 * n, "prefix_queries": 10 * n, "ttft_sum": 0.25 * n,
            "ttft_count": n, "generation_tokens": 10 * n,
        })  # fmt: skip


def _figures(page) -> dict[str, str]:
    return page.eval_on_selector_all(
        "#engine-metrics tr[data-instance='tiny-0'] td[data-metric]",
        "cells => Object.fromEntries(cells.map("
        "c => [c.dataset.metric, c.querySelector('.figure').textContent]))",
    )


def test_the_engine_table_shows_each_instances_figures_and_follows_them(live_server, page, store):
    _scraped(store, time.time())
    page.goto(f"{live_server.url}/services/tiny/#monitoring")
    page.wait_for_selector("#engine-metrics tr[data-instance='tiny-0'] td[data-metric]")
    assert _figures(page) == {
        "running": "2", "waiting": "1", "kv_cache": "50%", "prefix_hit_rate": "50%",
        "ttft": "250 ms", "generation_tps": "10.0",
    }  # fmt: skip
    lines = page.locator("#engine-metrics tr[data-instance='tiny-0'] svg.spark polyline")
    assert lines.count() == 6  # one unbroken line per figure
    waiting = page.inner_text("#engine-metrics tr[data-instance='tiny-1']")
    assert "starting" in waiting and "not ready" in waiting
    if SHOTS:
        page.locator("#engine-card").screenshot(path=os.path.join(SHOTS, "engine-table.png"))

    write(store, "tiny-0", {"at": time.time(), "running": 7, "waiting": 0})
    page.wait_for_function(
        "() => document.querySelector(\"tr[data-instance='tiny-0'] td[data-metric=running]"
        " .figure\").textContent === '7'",
        timeout=10_000,
    )  # the next refresh, a few seconds later


def test_a_ready_instance_without_a_sample_says_why(live_server, page):
    page.goto(f"{live_server.url}/services/tiny/#monitoring")
    row = page.wait_for_selector("#engine-metrics tr[data-instance='tiny-0']")
    assert "not scraped" in row.inner_text()


def test_the_overview_names_the_autoscaler_and_the_routing_policy(page, live_server):
    """As a viewer sees it (no action buttons: the page once stopped there)."""
    spec = {
        **SPEC,
        "name": "scaled",
        "metadata": {"rpc": {"routing": "prefix_cache"}},
        "autoscaler": {
            "min": 0,
            "max": 4,
            "scaleStrategies": [
                {"metricName": "qps", "threshold": 10},
                {"metricName": "queue", "threshold": 4},
            ],
        },
    }
    Service.objects.create(workspace=default_workspace(), name="scaled", spec=spec)  # fmt: skip
    page.goto(f"{live_server.url}/services/scaled/")
    summary = page.locator("#svc-summary")
    summary.locator("dd:has-text('0–4 instances on qps 10, queue 4')").wait_for()
    assert "prefix_cache" in summary.inner_text()
    page.goto(f"{live_server.url}/services/tiny/")
    page.locator("#svc-summary dd:has-text('least_outstanding')").wait_for()
    assert "Autoscaler\noff" in page.locator("#svc-summary").inner_text()


def test_an_async_services_overview_shows_its_queue(page, live_server):
    """The Queue card as a viewer sees it; none for a service without queues."""
    spec = {"name": "sd", "metadata": {"type": "Async", "rpc": {"worker_threads": 1}},
            "containers": [{"image": "i", "command": "serve", "port": 8000}]}  # fmt: skip
    service = Service.objects.create(workspace=default_workspace(), name="sd", spec=spec)
    queue = queue_store.queue_of(service, "input")
    for n in range(3):
        queue_store.put(queue, b"{}", tags={"n": str(n)})
    queue_store.lease(service, "gw", ["sd-0"], 30)
    page.goto(f"{live_server.url}/services/sd/")
    figures = page.locator("#queue-figures")
    figures.locator("dd:has-text('2 of at most 10000')").wait_for()
    assert "1 (each instance takes 1 at once)" in figures.inner_text()
    page.goto(f"{live_server.url}/services/tiny/")
    page.locator("#svc-summary dd").first.wait_for()
    page.wait_for_timeout(500)  # the card's first read
    assert page.locator("#queue-card").is_hidden()
