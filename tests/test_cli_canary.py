"""`wharf services canary`: its arguments (pure), its follow (each change of state, step or
judgement printed once, the exit code from the outcome), and the commands against the live
API."""

from __future__ import annotations

import json

import pytest

from controlplane.services.models import Canary
from tests.test_cli_groups import FIRST, LONE, spec, two_members, wharf  # noqa: F401 (fixtures)
from tests.test_eas_openapi import broker  # noqa: F401 (a fixture: the reconciler's asks)
from wharfcli.canary import follow, seconds, steps
from wharfcli.client import USAGE, CliError


@pytest.mark.parametrize(("text", "value"), [("90", 90), ("90s", 90), ("2m", 120), ("1h", 3600)])
def test_an_interval_is_a_duration(text, value):
    assert seconds(text) == value


@pytest.mark.parametrize("text", ["", "1.5m", "ten", "5d", "-1s"])
def test_a_bad_interval_is_bad_usage(text):
    with pytest.raises(CliError) as raised:
        seconds(text)
    assert raised.value.exit_code == USAGE and "--interval" in raised.value.message


def test_steps_are_percentages_separated_by_commas():
    assert steps("10,50,100") == [10, 50, 100]
    with pytest.raises(CliError) as raised:
        steps("10;50")
    assert raised.value.exit_code == USAGE


class Releases:
    """The API's answers to GET …/canary, one per poll."""

    def __init__(self, *answers: tuple[str, int, int, str]) -> None:
        self.answers = [{"state": s, "step": i, "weight": w, "message": m}
                        for s, i, w, m in answers]  # fmt: skip

    def get(self, path: str) -> dict:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


@pytest.mark.parametrize(("last", "code"), [("promoted", 0), ("rolled_back", 1), ("aborted", 1)])
def test_follow_prints_each_change_once_and_exits_by_the_outcome(capsys, monkeypatch, last, code):
    monkeypatch.setattr("wharfcli.canary.POLL_S", 0)
    client = Releases(
        ("starting", 0, 0, "starting: 0 of 2 canary instances ready"),
        ("starting", 0, 0, "starting: 1 of 2 canary instances ready"),  # same kind: not again
        ("running", 0, 10, "measuring: 5 of 60 s"),
        ("running", 0, 10, "measuring: 7 of 60 s"),
        ("running", 1, 50, "measuring: 1 of 60 s"),
        (last, 1, 0, "the end"),
    )
    assert follow(client, "web") == code
    printed = capsys.readouterr().out.splitlines()
    assert [row.split()[1:3] for row in printed] == [
        ["starting", "0%"], ["running", "10%"], ["running", "50%"], [last, "0%"]]  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_start_show_and_act_on_a_release_against_the_live_api(two_members, tmp_path):  # noqa: F811
    new = spec(FIRST, "g")
    new["containers"][0]["env"] = [{"name": "V", "value": "2"}]
    path = tmp_path / "new.json"
    path.write_text(json.dumps(new))
    code, output = two_members("services", "canary", FIRST, "-f", str(path), "--steps", "20,100",
                               "--interval", "2m", "--no-follow")  # fmt: skip
    assert code == 0, output
    release = Canary.objects.get(service__name=FIRST)
    assert (release.steps, release.interval_s, release.state) == ([20, 100], 120, "starting")
    code, output = two_members("services", "canary", FIRST)
    assert code == 0 and "state:" in output and "20% → 100%" in output
    code, output = two_members("-o", "json", "services", "canary", FIRST, "--pause")
    assert code == 0 and json.loads(output)["state"] == "paused"
    code, output = two_members("services", "canary", FIRST, "--abort")
    assert code == 0 and "aborted" in output
    code, output = two_members("services", "canary", FIRST, "-f", str(path), "--steps", "50,10")
    assert code == 1 and "steps" in output  # the API names it
    assert two_members("services", "canary", FIRST, "-f", str(path), "--abort")[0] == USAGE
    assert two_members("services", "canary", LONE)[0] == 4  # no such service
