"""The service page charts the stored benchmark runs (frontend/static/frontend/bench_chart.js):
Chromium on Django's live server, signed in, with runs stored through the API."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from controlplane.benchmarks.validation import FIGURES
from controlplane.services.models import Service
from controlplane.tokens.models import ApiToken
from launcher.stack import ROOT
from tests.api_support import default_workspace, member
from tests.browser.chromium import browser_context, require_browser

PASSWORD = "bench-console-password"
URL = "/api/v1/services/svc/benchmarks"
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"


def row(point: dict, throughput: float, ttft: float | None) -> dict:
    figures = {name: 1.0 for name in FIGURES} | {"requests": 4, "failed": 0,
                                                 "token_mismatches": 0}  # fmt: skip
    return {**point, **figures, "output_throughput": throughput, "ttft_ms_p50": ttft}


STATIC = {"kind": "static", "parameters": {"epochs": 1}, "rows": [
    row({"parallel_num": n, "prompt_tokens": p, "output_tokens": 8}, 10.0 * n + p, 5.0 * n)
    for p in (32, 64) for n in (1, 2, 4)
]}  # fmt: skip
DYNAMIC = {"kind": "dynamic", "parameters": {"dataset_type": "custom", "dataset": "d.json"},
           "rows": [row({"request_rate": r, "num_prompts": 6}, 20.0 * r, None if r > 3 else 9.0)
                    for r in (1.0, 2.0, 4.0)]}  # fmt: skip


@pytest.fixture
def console(live_server, transactional_db):
    """Opens the console signed in, after storing the runs given (the ORM cannot be used
    while Playwright's event loop runs)."""
    require_browser()
    user = get_user_model().objects.create_user("bencher", password=PASSWORD, is_staff=True)
    spec = {"name": "svc", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}
    Service.objects.create(workspace=default_workspace(), name="svc", spec=spec)

    @contextmanager
    def signed_in(*runs: dict):
        client = APIClient()
        client.credentials(
            HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user, member(user, 'owner'), 'bench')}"
        )
        for run in runs:
            assert client.post(URL, run, format="json").status_code == 201
        with browser_context() as context:
            page = context.new_page()
            page.set_default_timeout(20_000)
            page.goto(f"{live_server.url}/login/")
            page.fill("input[name=username]", "bencher")
            page.fill("input[name=password]", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(f"{live_server.url}/")
            yield page

    return signed_in


def test_without_runs_the_page_says_how_to_make_one(console, live_server):
    with console() as page:
        page.goto(f"{live_server.url}/services/svc/#monitoring")
        page.wait_for_selector("#bench-charts code")
        assert "wharf bench static svc" in page.inner_text("#bench-charts")


def test_each_run_is_charted_against_concurrency_or_rate(console, live_server):
    with console(STATIC, DYNAMIC) as page:
        page.goto(f"{live_server.url}/services/svc/")
        page.click('[data-tab="monitoring"]')
        # The newest run (dynamic) first: one line of three rates; TTFT has no point at rate 4.
        page.wait_for_selector("#bench-charts [data-bench-chart=output_throughput] svg")
        throughput = "#bench-charts [data-bench-chart=output_throughput]"
        ttft = "#bench-charts [data-bench-chart=ttft_ms_p50]"
        assert page.locator(f"{throughput} circle").count() == 3
        assert page.locator(f"{ttft} circle").count() == 2
        assert "requests/s" in page.inner_text(throughput)
        tip = page.locator(f"{throughput} circle title").nth(2).text_content()
        assert tip == "dataset, requests/s 4: 80.0 output tokens/s"
        # The static run: a line per length pair, against concurrency 1, 2, 4.
        static_id = page.locator("#bench-run option").nth(1).get_attribute("value")
        page.select_option("#bench-run", static_id)
        page.wait_for_selector(f"{throughput} polyline:nth-of-type(2)")
        assert page.locator(f"{throughput} polyline").count() == 2
        assert page.locator(f"{throughput} circle").count() == 6
        assert "64 in / 8 out" in page.inner_text("#bench-charts .bench-legend")
        labels = page.locator(f"{throughput} text").all_text_contents()
        assert {"1", "2", "4", "concurrency"} <= set(labels)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("#bench-charts").screenshot(path=str(SCREENSHOTS / "bench-charts.png"))
