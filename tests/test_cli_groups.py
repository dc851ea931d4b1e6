"""`wharf groups list|describe|weights` and `wharf services release`: their pure parts,
table-driven, then the commands against Django's live server on the real API, with the API's
state (the database and the published routing snapshot) checked after each."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from django.contrib.auth import get_user_model

from contracts import reconcile
from controlplane.services.models import Service, ServiceGroup
from controlplane.tokens.models import ApiToken
from tests.api_support import member, published
from tests.test_eas_openapi import broker  # noqa: F401 (a fixture: the reconciler's asks)
from wharfcli.client import USAGE, CliError
from wharfcli.groups import member_shares, parse_weights, percent
from wharfcli.main import cli

GROUP, FIRST, SECOND, LONE = "g", "g-a", "g-b", "lone"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ([], {}),
        (["a=90", "b=10"], {"a": 90, "b": 10}),
        (["a=0", "b=1000"], {"a": 0, "b": 1000}),
        (["svc_1-x=007"], {"svc_1-x": 7}),
    ],
)
def test_weights_are_member_equals_weight(arguments, expected):
    assert parse_weights(arguments) == expected


@pytest.mark.parametrize(
    ("arguments", "named", "reason"),
    [
        (["a"], "'a'", "MEMBER=WEIGHT"),
        (["a="], "'a='", "MEMBER=WEIGHT"),
        (["=5"], "'=5'", "MEMBER=WEIGHT"),
        (["a=x"], "'a=x'", "MEMBER=WEIGHT"),
        (["a=1.5"], "'a=1.5'", "MEMBER=WEIGHT"),
        (["a=-1"], "'a=-1'", "MEMBER=WEIGHT"),
        (["a=+1"], "'a=+1'", "MEMBER=WEIGHT"),
        (["a=1_000"], "'a=1_000'", "MEMBER=WEIGHT"),  # int() would take it
        (["a= 5"], "'a= 5'", "MEMBER=WEIGHT"),
        (["a=b=5"], "'a=b=5'", "MEMBER=WEIGHT"),
        (["a=1001"], "'a=1001'", "0-1000"),
        (["b=1", "a=10", "a=20"], "'a=20'", "a is given twice"),
    ],
)
def test_a_bad_weight_is_bad_usage_naming_the_argument(arguments, named, reason):
    with pytest.raises(CliError) as caught:
        parse_weights(arguments)
    assert caught.value.exit_code == USAGE
    assert named in caught.value.message and reason in caught.value.message


@pytest.mark.parametrize(
    ("share", "text"),
    [(0.0, "0%"), (1.0, "100%"), (0.9, "90%"), (0.1, "10%"), (1 / 3, "33.3%"), (0.0004, "0%"),
     (0.0049, "0.5%"), (0.125, "12.5%")],
)  # fmt: skip
def test_a_share_reads_as_a_percentage(share, text):
    assert percent(share) == text


def test_members_show_their_share_or_that_they_stand_alone():
    group = {"members": [
        {"service": "a", "traffic_state": "grouping", "share": 0.9},
        {"service": "b", "traffic_state": "grouping", "share": 0.1},
        {"service": "c", "traffic_state": "standalone", "share": 0.0},
    ]}  # fmt: skip
    assert member_shares(group) == "a=90%,b=10%,c=standalone"
    assert member_shares({"members": []}) == ""


# --- against the live API --------------------------------------------------------------------

LIVE = pytest.mark.django_db(transaction=True)


def spec(name: str, group: str | None) -> dict:
    """A service no engine has to serve: the reconciler is asked, nothing runs it here."""
    metadata: dict = {"instance": 1} | ({"group": group} if group else {})
    return {"name": name, "containers": [{"image": "none", "command": "exec sleep 300",
            "port": 8000}], "metadata": metadata}  # fmt: skip


@pytest.fixture
def wharf(live_server, broker, store, tmp_path):  # noqa: F811 (broker: a fixture)
    """`wharf ARGS...` in process, signed in as alice: (exit code, output)."""
    user = get_user_model().objects.create_user("alice")
    token = ApiToken.issue(user, member(user), "cli")
    env = {"WHARF_API": live_server.url, "WHARF_TOKEN": token,
           "WHARF_CONFIG_DIR": str(tmp_path / "wharf")}  # fmt: skip

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli, list(args), env=env)
        return result.exit_code, result.output

    yield run
    broker.delete(*[reconcile.pending_key(n) for n in (FIRST, SECOND, LONE)])


@pytest.fixture
def two_members(wharf, tmp_path):
    """Two services in group GROUP: the first released into it, the second standalone."""
    for name in (FIRST, SECOND):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(spec(name, GROUP)))
        code, output = wharf("services", "create", "-f", str(path))
        assert code == 0, output
    return wharf


def state(name: str) -> tuple[str, int]:
    service = Service.objects.get(name=name)
    return service.traffic_state, service.group_weight


def member_rows(output: str) -> list[list[str]]:
    """The cells of describe's member table, its header first."""
    return [row.split() for row in output.split("members:\n")[1].splitlines()]


def routed(store) -> dict[str, int]:
    """The group's members the gateways route to, with their weights."""
    return {m.service: m.weight for m in published(store).groups[GROUP].members}


@LIVE
def test_list_and_describe_show_the_group_and_its_members(two_members):
    code, output = two_members("groups", "list")
    assert code == 0, output
    header, row = output.splitlines()
    assert header.split() == ["NAME", "MODE", "MEMBERS", "ENDPOINT"]
    assert row.split()[:3] == [GROUP, "auto", f"{FIRST}=100%,{SECOND}=standalone"]
    assert row.endswith(f"/api/predict/{GROUP}")

    code, output = two_members("-o", "json", "groups", "list")
    assert code == 0 and [g["name"] for g in json.loads(output)] == [GROUP]

    code, output = two_members("groups", "describe", GROUP)
    assert code == 0, output
    assert re.search(r"^traffic_mode:\s+auto$", output, re.M) and f"model={GROUP}" in output
    assert member_rows(output) == [["SERVICE", "STATE", "WEIGHT", "READY", "SHARE"],
                                   [FIRST, "grouping", "100", "0", "100%"],
                                   [SECOND, "standalone", "100", "0", "0%"]]  # fmt: skip
    assert two_members("groups", "describe", "no-such-group")[0] == 4


@LIVE
def test_release_moves_a_member_into_and_out_of_the_groups_traffic(two_members, store):
    assert routed(store) == {FIRST: 100}
    code, output = two_members("services", "release", SECOND, "--weight", "300")
    assert code == 0, output
    assert state(SECOND) == ("standalone", 300)  # a weight alone releases nothing
    code, output = two_members("services", "release", SECOND, "--traffic-state", "grouping")
    assert code == 0, output
    assert state(SECOND) == ("grouping", 300)
    assert routed(store) == {FIRST: 100, SECOND: 300}
    # auto mode, no member ready: one each, as the API says
    assert f"{FIRST}=50%,{SECOND}=50%" in two_members("groups", "list")[1]

    code, output = two_members("-o", "json", "services", "release", FIRST,
                               "--traffic-state", "standalone")  # fmt: skip
    assert code == 0 and json.loads(output)["name"] == GROUP
    assert state(FIRST) == ("standalone", 100) and routed(store) == {SECOND: 300}


@LIVE
def test_weights_are_applied_together_and_make_the_split_customized(two_members, store):
    two_members("services", "release", SECOND, "--traffic-state", "grouping")
    code, output = two_members("groups", "weights", GROUP, f"{FIRST}=900", f"{SECOND}=100")
    assert code == 0, output
    assert ServiceGroup.objects.get(name=GROUP).traffic_mode == "customized"
    assert (state(FIRST), state(SECOND)) == (("grouping", 900), ("grouping", 100))
    assert routed(store) == {FIRST: 900, SECOND: 100}
    assert member_rows(output)[1:] == [[FIRST, "grouping", "900", "0", "90%"],
                                       [SECOND, "grouping", "100", "0", "10%"]]  # fmt: skip

    code, output = two_members("groups", "weights", GROUP, f"{FIRST}=0", f"{SECOND}=1000")
    assert code == 0 and routed(store) == {FIRST: 0, SECOND: 1000}  # blue-green, one call

    code, output = two_members("groups", "weights", GROUP, "--mode", "auto",
                               "--session-header", "X-Chat-Id")  # fmt: skip
    assert code == 0, output
    group = ServiceGroup.objects.get(name=GROUP)
    assert (group.traffic_mode, group.session_header) == ("auto", "x-chat-id")
    assert published(store).groups[GROUP].mode == "auto"
    assert state(SECOND) == ("grouping", 1000)  # the weights are kept for a later customized


@LIVE
def test_refusals_name_the_field_and_exit_as_documented(two_members, tmp_path):
    code, output = two_members("groups", "weights", GROUP, "nope=5")
    assert code == 1 and "weights.nope" in output and "not a member" in output
    assert state(FIRST) == ("grouping", 100)  # nothing was applied
    assert two_members("groups", "weights", "no-such-group", f"{FIRST}=5")[0] == 4
    assert two_members("services", "release", "no-such-service", "--weight", "5")[0] == 4

    path = tmp_path / "lone.json"
    path.write_text(json.dumps(spec(LONE, None)))
    assert two_members("services", "create", "-f", str(path))[0] == 0
    code, output = two_members("services", "release", LONE, "--weight", "5")
    assert code == 1 and "metadata.group" in output

    for usage in (("groups", "weights", GROUP), ("services", "release", SECOND),
                  ("groups", "weights", GROUP, "a=1001"),
                  ("services", "release", SECOND, "--weight", "1001"),
                  ("groups", "weights", GROUP, "--mode", "random")):  # fmt: skip
        assert two_members(*usage)[0] == USAGE, usage
    assert state(SECOND) == ("standalone", 100)


@LIVE
def test_services_mirror_sets_shows_and_stops_the_copies(two_members, store):
    code, output = two_members("services", "mirror", FIRST, "--to", SECOND, "--ratio", "10")
    assert code == 0, output
    assert re.search(rf"^targets:\s+{SECOND}$", output, re.M) and "ratio:   10%" in output
    assert f"{SECOND} (copies)" in output and "TTFT P95" in output
    routed_service = published(store).services[FIRST]
    assert (routed_service.mirror_targets, routed_service.mirror_ratio) == ((SECOND,), 10)
    code, output = two_members("-o", "json", "services", "mirror", FIRST)
    assert code == 0 and json.loads(output)["targets"] == [SECOND]
    assert two_members("services", "mirror", FIRST, "--to", SECOND)[0] == 2  # no ratio
    assert two_members("services", "mirror", FIRST, "--off", "--ratio", "5")[0] == 2
    code, output = two_members("services", "mirror", FIRST, "--to", FIRST, "--ratio", "5")
    assert code == 1 and "targets[0]" in output  # the API names it
    code, output = two_members("services", "mirror", FIRST, "--off")
    assert code == 0 and re.search(r"^targets:\s+none$", output, re.M)
    assert published(store).services[FIRST].mirror_targets == ()
