"""deploy/prometheus/alerts.yaml: Prometheus' own tool checks the rules and runs their tests
against recorded series (alerts_test.yaml), and every series a rule reads is one that Wharf
exports (the API's /metrics, the gateway's) or that a real vLLM serves (tests/fixtures/)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from gateway.observe.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy/prometheus"
VLLM_PAGES = [ROOT / "tests/fixtures/vllm_metrics_prefix_cache.txt",
              ROOT / "tests/fixtures/vllm_metrics_spec_decode.txt"]  # fmt: skip
# promtool comes from Debian's `prometheus` package (.ci/run installs it). Missing, these
# tests fail rather than skip: the rules would ship untested.
PROMTOOL = shutil.which("promtool") or "promtool"


def promtool(*args: str, cwd: Path = RULES) -> subprocess.CompletedProcess:
    if not shutil.which(PROMTOOL):
        pytest.fail("promtool not found: apt-get install --no-install-recommends prometheus")
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def rules() -> list[dict]:
    groups = yaml.safe_load((RULES / "alerts.yaml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_accepts_the_rules():
    check = promtool("check", "rules", "alerts.yaml")
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(rules())} rules found" in check.stdout


def test_every_rule_fires_and_stays_silent_as_its_recorded_series_say():
    run = promtool("test", "rules", "alerts_test.yaml")
    assert run.returncode == 0, run.stdout + run.stderr
    tested = {
        case["alertname"]
        for test in yaml.safe_load((RULES / "alerts_test.yaml").read_text())["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert tested == {rule["alert"] for rule in rules()}, "a rule that never fires in a test"


def test_a_rule_that_no_series_satisfies_fails_its_test(tmp_path):
    """The tests can fail: the queue rule with a threshold its series never reach."""
    queue = "(vllm:num_requests_waiting) > "
    text = (RULES / "alerts.yaml").read_text().replace(queue + "10", queue + "1000")
    (tmp_path / "alerts.yaml").write_text(text)
    (tmp_path / "alerts_test.yaml").write_text((RULES / "alerts_test.yaml").read_text())
    run = promtool("test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert run.returncode != 0 and "WharfEngineQueueGrowing" in run.stdout + run.stderr


def _names(text: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.mark.django_db
def test_every_series_a_rule_reads_is_exported(settings, redis_url):
    settings.WHARF_API_METRICS_TOKEN = "t"
    settings.REDIS_URL = redis_url  # the usage backlog's figure is read from Redis
    api = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer t").content.decode()
    gateway = Metrics()
    gateway.answered("chat", 200, 0.1)  # labelled series appear once they have a child
    gateway.first_byte_after("chat", 0.05)
    exported = _names(api) | _names(gateway.exposition()[0].decode())
    exported |= {line.split("{")[0].split(" ")[0] for page in VLLM_PAGES
                 for line in page.read_text().splitlines() if line.startswith("vllm:")}  # fmt: skip
    # The API's families with no rows (no service, node or quota yet) show by their HELP line.
    exported |= set(re.findall(r"^# HELP (\S+)", api, re.MULTILINE))
    exprs = [re.sub(r"\b(?:by|on) \([^)]*\)", "", rule["expr"]) for rule in rules()]  # labels
    used = {name for expr in exprs
            for name in re.findall(r"\b(?:wharf_[a-z_]+|vllm:[a-z_]+)\b", expr)}  # fmt: skip
    assert len(used) == 11
    assert used <= exported, f"read by a rule, exported by nothing: {used - exported}"
