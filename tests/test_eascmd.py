"""`eascmd`'s pure parts, table-driven: -D settings, EAS's merge, its tables and config file;
the command against a real stack is tests/test_eascmd_e2e.py."""

from __future__ import annotations

import stat

import pytest
from click.testing import CliRunner

from wharfcli.client import USAGE, CliError
from wharfcli.eascmd import cli
from wharfcli.eascmd_config import Profile, normalise_endpoint
from wharfcli.eascmd_output import (
    LIST_HEADER,
    WORKER_HEADER,
    boxed,
    describe_rows,
    list_row,
    waiting_line,
    worker_row,
)
from wharfcli.eascmd_spec import apply_settings, merge, parse_setting

EAS_SPEC = {"metadata": {"name": "demo", "instance": 1, "eas.termination_grace_period": 30},
            "containers": [{"image": "img:1", "script": "python app.py", "port": 80}]}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "path", "value"),
    [
        ("metadata.instance=2", ["metadata", "instance"], 2),
        ("metadata.cpu=0.5", ["metadata", "cpu"], 0.5),
        ("metadata.enable_grpc=true", ["metadata", "enable_grpc"], True),
        ("containers.0.image=reg/img:2", ["containers", "0", "image"], "reg/img:2"),
        ('labels={"team": "a"}', ["labels"], {"team": "a"}),
        ('metadata.name="007"', ["metadata", "name"], "007"),
        ("metadata.note=a=b", ["metadata", "note"], "a=b"),
        ("metadata.note=", ["metadata", "note"], ""),
    ],
)
def test_a_setting_is_a_dotted_path_and_a_json_or_text_value(text, path, value):
    assert parse_setting(text) == (path, value)


@pytest.mark.parametrize("text", ["metadata.instance", "=2", "metadata..cpu=1", "metadata.=1"])
def test_a_malformed_setting_is_bad_usage(text):
    with pytest.raises(CliError) as caught:
        parse_setting(text)
    assert caught.value.exit_code == USAGE


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (["metadata.instance=2", "metadata.cpu=5"],
         {**EAS_SPEC, "metadata": {**EAS_SPEC["metadata"], "instance": 2, "cpu": 5}}),
        (["metadata.eas.termination_grace_period=60"],  # the flat key the spec has
         {**EAS_SPEC, "metadata": {**EAS_SPEC["metadata"], "eas.termination_grace_period": 60}}),
        (["containers.0.image=img:2"],
         {**EAS_SPEC, "containers": [{**EAS_SPEC["containers"][0], "image": "img:2"}]}),
        (["rpc.keepalive=5000"], {**EAS_SPEC, "rpc": {"keepalive": 5000}}),
    ],
)  # fmt: skip
def test_settings_land_where_the_spec_has_them(settings, expected):
    assert apply_settings(EAS_SPEC, settings) == expected
    assert EAS_SPEC["metadata"]["instance"] == 1  # the original is untouched


@pytest.mark.parametrize(
    "settings", [["containers.3.image=x"], ["containers.image=x"], ["metadata.name.x=1"]]
)
def test_a_setting_the_spec_cannot_hold_is_bad_usage(settings):
    with pytest.raises(CliError) as caught:
        apply_settings(EAS_SPEC, settings)
    assert caught.value.exit_code == USAGE


@pytest.mark.parametrize(
    ("current", "change", "expected"),
    [
        ({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}}, {"a": {"b": 1, "c": 3}}),  # key by key
        ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),  # arrays replaced
        ({"a": {"b": 1}}, {"a": 5}, {"a": 5}),  # a scalar replaces an object
        ({"a": 1}, {"b": {"c": 1}}, {"a": 1, "b": {"c": 1}}),  # new keys added
        ({"a": {"b": {"c": 1, "d": 2}}}, {"a": {"b": {"d": None}}},
         {"a": {"b": {"c": 1, "d": None}}}),  # null replaces too
        ({"a": 1}, {}, {"a": 1}),
    ],
)  # fmt: skip
def test_merge_is_eas_update_service_merge(current, change, expected):
    assert merge(current, change) == expected


def test_boxed_table_has_a_centred_header_and_multi_line_cells():
    text = boxed([["a", "x\ny"], ["bbb", "z"]], ["K", "VALUE"])
    assert text.splitlines() == [
        "+-----+-------+",
        "|  K  | VALUE |",
        "+-----+-------+",
        "| a   | x     |",
        "|     | y     |",
        "| bbb | z     |",
        "+-----+-------+",
    ]


SERVICE = {"name": "demo", "workspace": "default", "phase": "running", "instances": 2,
           "ready_instances": 1, "version": 3, "progress": "", "last_error": "",
           "created_at": "2026-01-05T14:03:22Z", "updated_at": None,
           "endpoints": {"eas": "http://gw/api/predict/demo", "openai": "http://gw/v1",
                         "model": "demo"}}  # fmt: skip
INSTANCE = {"name": "demo-1", "state": "ready", "node": "local", "url": "http://10.0.0.5:31000",
            "restarts": 2, "message": "", "restart_at": None,
            "created_at": "2026-01-05T14:03:22+00:00"}  # fmt: skip


@pytest.mark.parametrize(
    ("header", "row", "expected"),
    [
        (LIST_HEADER, list_row(SERVICE),
         {"SERVICENAME": "demo", "REGION": "default", "INSTANCE": 2, "STATUS": "Running",
          "WEIGHT": 0, "SERVICEPATH": "/api/predict/demo", "UPDATETIME": "-"}),
        (LIST_HEADER, list_row({**SERVICE, "group": None}), {"WEIGHT": 0}),
        (LIST_HEADER, list_row({**SERVICE, "group": {"name": "chat", "traffic_state": "grouping",
                                                     "weight": 90}}),
         {"WEIGHT": 90, "SERVICEPATH": "/api/predict/demo"}),
        (LIST_HEADER, list_row({**SERVICE, "group": {"name": "chat",
                                                     "traffic_state": "standalone", "weight": 0}}),
         {"WEIGHT": 0}),
        (WORKER_HEADER, worker_row(INSTANCE),
         {"INSTANCENAME": "demo-1", "INNERIP": "10.0.0.5:31000", "HOSTIP": "local",
          "RESTARTS": 2, "STATUS": "Ready", "READY": "[1/1]", "REASON": "-", "LASTSTATE": "{}"}),
        (WORKER_HEADER, worker_row({**INSTANCE, "state": "backoff", "message": "exit 1\n" * 30,
                                    "restart_at": "2026-01-05T14:05:00Z", "url": ""}),
         {"INNERIP": "-", "STATUS": "Backoff", "READY": "[0/1]",
          "LASTSTATE": '{"restartAt": "2026-01-05T14:05:00Z"}'}),
    ],
)  # fmt: skip
def test_table_rows_have_eascmd_columns(header, row, expected):
    assert len(row) == len(header)
    cells = dict(zip(header, row, strict=True))
    assert {k: cells[k] for k in expected} == expected
    assert cells.get("CREATETIME", cells.get("STARTAT", "")).count(":") == 2  # local time


def test_a_long_reason_is_cut():
    reason = worker_row({**INSTANCE, "message": "x" * 500})[7]
    assert len(reason) == 60 and reason.endswith("...")


def test_describe_rows_are_eascmd_keys_with_the_token_masked():
    spec = {**EAS_SPEC, "metadata": {**EAS_SPEC["metadata"], "memory": 2000, "cpu": 2}}
    rows = dict(describe_rows(SERVICE, spec, [{"number": 3}, {"number": 2}]))
    assert list(rows)[:2] == ["Status", "ServiceName"]
    assert rows["AccessToken"] == "******"
    assert (rows["TotalInstance"], rows["RunningInstance"], rows["PendingInstance"]) == (2, 1, 1)
    assert (rows["CPU"], rows["GPU"], rows["Memory"], rows["Image"]) == (2, 0, "2000M", "img:1")
    assert (rows["LatestVersion"], rows["CurrentVersion"]) == (3, 3)
    assert '"instance": 1' in rows["ServiceConfig"]
    assert "eas: http://gw/api/predict/demo" in rows["Endpoints"]


@pytest.mark.parametrize(
    ("service", "line"),
    [
        (SERVICE, "[OK] Running [Total: 2, Pending: 1, Running: 1]"),
        ({**SERVICE, "phase": "deploying", "ready_instances": 0, "progress": "pulling"},
         "[OK] Deploying [Total: 2, Pending: 2, Running: 0] pulling"),
    ],
)  # fmt: skip
def test_progress_lines_are_eascmds(service, line):
    assert waiting_line(service) == line


@pytest.mark.parametrize(
    ("given", "expected"),
    [("127.0.0.1:8000", "http://127.0.0.1:8000"), ("https://wharf.example/", "https://wharf.example"),
     ("http://h:8000", "http://h:8000"), ("", "")],
)  # fmt: skip
def test_an_endpoint_is_an_api_address(given, expected):
    assert normalise_endpoint(given) == expected


def test_config_keeps_the_key_in_a_private_file_and_never_prints_it(tmp_path):
    path = tmp_path / "eas" / "config"
    result = CliRunner().invoke(
        cli, ["-c", str(path), "config", "-i", "ops", "-k", "wat-secret", "-e", "h:8000"]
    )
    assert result.exit_code == 0, result.output
    assert "wat-secret" not in result.output and "http://h:8000" in result.output
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert Profile.load(path) == Profile("ops", "wat-secret", "http://h:8000")
    # a later config changes only what it is given
    CliRunner().invoke(cli, ["-c", str(path), "config", "-e", "other:9000"])
    assert Profile.load(path) == Profile("ops", "wat-secret", "http://other:9000")


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["bench", "create", "b.json"], USAGE, "not available on Wharf"),
        (["resource", "ls"], USAGE, "not available on Wharf"),
        (["pysdk", "init", "./d"], USAGE, "not available on Wharf"),
        (["upload", "m.tar.gz"], USAGE, "not available on Wharf"),
        (["test", "s.json"], USAGE, "not available on Wharf"),
        (["modify", "demo"], USAGE, "give -s FILE or -Dkey=value"),
        (["ls"], 3, "no endpoint (-e)"),
        (["-e", "h:1", "ls"], 3, "no access key (-k"),
        (["-k", "t", "-e", "127.0.0.1:9", "ls"], 5, "cannot reach the Wharf API"),
        (["version", "demo", "0"], USAGE, ""),
    ],
)  # fmt: skip
def test_failures_exit_non_zero_with_a_reason(tmp_path, monkeypatch, args, code, says):
    monkeypatch.setenv("EASCMD_CONFIG_DIR", str(tmp_path))
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == code, result.output
    assert says in result.output
