"""The `wharf` CLI's pure parts, table-driven, and its config file; the CLI against a real
stack is tests/test_cli_e2e.py."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime

import httpx
import pytest
from click.testing import CliRunner

from wharfcli.client import describe_refusal, exit_code_for
from wharfcli.config import Config
from wharfcli.fleet import since_value
from wharfcli.main import cli
from wharfcli.service_ops import new_lines
from wharfcli.specs import set_instances
from wharfcli.watch import DONE, FAILED, verdict

RUNNING = {"phase": "running", "generation": 2, "observed_generation": 2,
           "ready_instances": 2, "instances": 2, "progress": ""}  # fmt: skip
JOB = {**RUNNING, "ready_instances": 0, "spec": {"metadata": {"workload_type": "elasticjob"}}}


@pytest.mark.parametrize(
    ("service", "goal", "expected"),
    [
        (RUNNING, "running", DONE),
        ({**RUNNING, "observed_generation": 1}, "running", None),  # status of the old spec
        ({**RUNNING, "ready_instances": 1}, "running", None),
        ({**RUNNING, "phase": "deploying"}, "running", None),
        ({**RUNNING, "phase": "failed"}, "running", FAILED),
        ({**RUNNING, "phase": "updating", "progress": "rollout paused: v3 fails"}, "running",
         FAILED),
        ({**RUNNING, "phase": "stopped"}, "stopped", DONE),
        ({**RUNNING, "phase": "stopping"}, "stopped", None),
        (RUNNING, "stopped", None),
        ({**JOB, "phase": "running"}, "running", DONE),  # it runs: no instance is ever ready
        ({**JOB, "phase": "running", "observed_generation": 1}, "running", None),
        ({**JOB, "phase": "completed"}, "running", DONE),
        ({**JOB, "phase": "deploying"}, "running", None),
        ({**JOB, "phase": "failed"}, "running", FAILED),
    ],
)  # fmt: skip
def test_verdict(service, goal, expected):
    assert verdict(service, goal) == expected


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ([], ["a", "b"], ["a", "b"]),
        (["a", "b"], ["a", "b"], []),
        (["a", "b"], ["b", "c"], ["c"]),
        (["a", "b", "c"], ["b", "c", "d", "e"], ["d", "e"]),
        (["x"], ["a", "b"], ["a", "b"]),  # rotated past: all of it is new
    ],
)
def test_new_lines_of_a_followed_log(old, new, expected):
    assert new_lines(old, new) == expected


NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("30m", "2026-11-24T11:30:00+00:00"),
        ("6h", "2026-11-24T06:00:00+00:00"),
        ("2d", "2026-11-22T12:00:00+00:00"),
        ("2026-11-01T00:00:00Z", "2026-11-01T00:00:00Z"),  # as it is; the API checks it
    ],
)
def test_since_value(value, expected):
    assert since_value(value, NOW) == expected


def test_scaling_sets_the_instances_of_the_service_or_of_a_role():
    plain = {"name": "a", "metadata": {"instance": 1}}
    assert set_instances(plain, 3, None)["metadata"]["instance"] == 3
    assert plain["metadata"]["instance"] == 1  # the original is left as it was
    pd = {"name": "b", "llm": {"pd": {"prefill": {"instance": 1}, "decode": {"instance": 1}}}}
    assert set_instances(pd, 2, "decode")["llm"]["pd"] == {
        "prefill": {"instance": 1}, "decode": {"instance": 2}}  # fmt: skip
    with pytest.raises(Exception, match="--role"):
        set_instances(pd, 2, None)
    with pytest.raises(Exception, match="only to a service with prefill/decode"):
        set_instances(plain, 2, "prefill")


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (400, {"detail": "Invalid spec.", "errors": {"llm.engine": ["unknown engine"]}},
         "Invalid spec.\n  llm.engine: unknown engine"),
        (400, {"phase": ["one of pending, running"]}, "  phase: one of pending, running"),
        (429, {"error": {"message": "rate limit reached", "type": "rate_limit"}},
         "rate limit reached"),
        (502, "bad gateway", "HTTP 502: bad gateway"),
    ],
)  # fmt: skip
def test_refusals_are_told_field_by_field(status, body, expected):
    response = (httpx.Response(status, json=body) if isinstance(body, dict)
                else httpx.Response(status, text=body))  # fmt: skip
    assert describe_refusal(response) == expected


@pytest.mark.parametrize(("status", "code"), [(400, 1), (401, 3), (403, 3), (404, 4), (500, 1)])
def test_exit_codes(status, code):
    assert exit_code_for(status) == code


def test_the_config_file_is_readable_by_its_owner_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("WHARF_CONFIG_DIR", str(tmp_path / "wharf"))
    monkeypatch.delenv("WHARF_API", raising=False)
    monkeypatch.delenv("WHARF_TOKEN", raising=False)
    config = Config.load()
    config.api, config.token = "http://api:8000", "secret"
    path = config.save()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    config.remember_service_token("demo", "svc-token")
    again = Config.load()
    assert again.effective() == ("http://api:8000", "secret")
    assert again.service_token("demo") == "svc-token"
    monkeypatch.setenv("WHARF_API", "http://other:9000/")
    monkeypatch.setenv("WHARF_TOKEN", "from-env")
    assert again.effective() == ("http://other:9000", "from-env")
    assert again.service_token("demo") == ""  # kept per API


def test_help_everywhere_and_eascmd_aliases():
    runner = CliRunner()
    top = runner.invoke(cli, ["--help"])
    assert top.exit_code == 0 and "Exit codes" in top.output
    for alias in ("create", "modify", "desc", "describe", "list", "delete", "start", "stop"):
        assert f"  {alias} " in top.output
    groups = {name: command for name, command in cli.commands.items()}
    for name, command in groups.items():
        sub = getattr(command, "commands", {})
        for leaf in [[name], *[[name, s] for s in sub]]:
            result = runner.invoke(cli, [*leaf, "--help"])
            assert result.exit_code == 0, (leaf, result.output)
            assert "Usage: " in result.output


def test_describe_at_the_top_is_services_describe():
    """kubectl's habit, beside eascmd's `desc`: the same command, not a look-alike."""
    describe = cli.commands["services"].commands["describe"]  # type: ignore[attr-defined]
    assert cli.commands["describe"] is describe and cli.commands["desc"] is describe


def test_an_unreachable_api_exits_5(tmp_path, monkeypatch):
    monkeypatch.setenv("WHARF_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("WHARF_API", "http://127.0.0.1:9")  # discard: nothing listens
    result = CliRunner().invoke(cli, ["services", "list"])
    assert result.exit_code == 5 and "cannot reach the Wharf API" in result.output
