"""Ascend rank tables from a cluster's pods (contracts.kube.rank_tables): pure, table-driven."""

from __future__ import annotations

import json

import pytest

from contracts.kube import names
from contracts.kube.rank_tables import DEVICE_ANNOTATIONS, cards, tables

HASH = "abc123"
OLD, NEW = DEVICE_ANNOTATIONS


def configuration(*cards: tuple[int, str], server: str = "192.168.0.7") -> str:
    devices = [{"device_id": str(card), "device_ip": ip} for card, ip in cards]
    return json.dumps({"pod_name": "p", "server_id": server, "devices": devices})


def pod(name: str, role: str, ip: str | None = "10.244.2.3", annotation: str | None = "",
        created: str = "2026-11-25T10:00:00Z", spec_hash: str = HASH, node: str = "npu-node-1",
        terminating: bool = False, key: str = OLD) -> dict:  # fmt: skip
    if annotation == "":
        annotation = configuration((0, "29.7.0.1"), (1, "29.7.1.1"))
    meta: dict = {
        "name": name, "creationTimestamp": created,
        "labels": names.labels("svc", role, spec_hash),
        "annotations": {key: annotation} if annotation is not None else {},
    }  # fmt: skip
    if terminating:
        meta["deletionTimestamp"] = "2026-11-25T10:05:00Z"
    ports = [{"name": "http", "containerPort": 8000}]
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "engine", "ports": ports}]},
        "status": {"podIP": ip} if ip else {},
    }


def loads(found, key: str) -> dict:
    return json.loads(found.data[key])


def servers(table: dict, group: str) -> list[str]:
    (found,) = [g for g in table["server_group_list"] if g["group_id"] == group]
    return [s["server_ip"] for s in found["server_list"]]


def test_one_prefill_and_one_decode_pod_make_complete_tables():
    found = tables([pod("p-1", "prefill", "10.0.0.5"), pod("d-1", "decode", "10.0.0.6")], HASH,
                   ["prefill", "decode"])  # fmt: skip
    assert (found.complete, found.waiting) == (True, "")
    assert sorted(found.data) == ["d-1.json", "global.json", "p-1.json"]
    table = loads(found, "global.json")
    assert table["status"] == "completed"
    assert (servers(table, "1"), servers(table, "2")) == (["10.0.0.5"], ["10.0.0.6"])
    (group,) = [g for g in table["server_group_list"] if g["group_id"] == "1"]
    assert group["server_list"][0]["device"] == [
        {"device_id": "0", "device_ip": "29.7.0.1", "rank_id": "0"},
        {"device_id": "1", "device_ip": "29.7.1.1", "rank_id": "1"},
    ]
    local = loads(found, "p-1.json")
    assert (local["status"], local["group_id"]) == ("completed", "0")
    assert local["server_list"][0]["server_ip"] == "10.0.0.5"


# Each row: the pods, what the tables wait for (empty: complete), who is listed.
CASES = [
    ([], "no prefill pod scheduled yet; no decode pod scheduled yet", []),
    ([pod("p-1", "prefill")], "no decode pod scheduled yet", ["p-1"]),
    ([pod("p-1", "prefill", ip=None), pod("d-1", "decode")],
     "pod p-1 has no IP yet", ["d-1"]),
    ([pod("p-1", "prefill", annotation=None), pod("d-1", "decode")],
     f"pod p-1 has no NPU addresses yet (the Ascend device plugin's {OLD} annotation)",
     ["d-1"]),
    ([pod("p-1", "prefill", annotation="{not json"), pod("d-1", "decode")],
     f"pod p-1 has no NPU addresses yet (the Ascend device plugin's {OLD} annotation)",
     ["d-1"]),
    # A terminating pod, another version's pod and an unscheduled one are not in the tables,
    # and do not hold them back.
    ([pod("p-1", "prefill"), pod("p-0", "prefill", terminating=True),
      pod("p-old", "prefill", spec_hash="0ld"), pod("p-2", "prefill", node=""),
      pod("d-1", "decode")], "", ["p-1", "d-1"]),
    # The newer annotation name does as well.
    ([pod("p-1", "prefill", key=NEW), pod("d-1", "decode")], "", ["p-1", "d-1"]),
    # A role with no pods wanted (stopped) is not waited for.
    ([pod("p-1", "prefill")], "", ["p-1"]),
]  # fmt: skip
ROLES = [["prefill", "decode"]] * 7 + [["prefill"]]


ROWS = [(*case, roles) for case, roles in zip(CASES, ROLES, strict=True)]


@pytest.mark.parametrize(("pods", "waiting", "listed", "roles"), ROWS)
def test_what_the_tables_wait_for(pods, waiting, listed, roles):
    found = tables(pods, HASH, roles)
    assert found.waiting == waiting and found.complete == (not waiting)
    assert sorted(k.removesuffix(".json") for k in found.data if k != "global.json") == sorted(
        listed
    )
    status = loads(found, "global.json")["status"]
    assert status == ("initializing" if waiting else "completed")


def test_pods_are_ranked_oldest_first_within_their_role():
    pods = [
        pod("p-b", "prefill", "10.0.0.2", created="2026-11-25T10:00:02Z"),
        pod("p-a", "prefill", "10.0.0.1", created="2026-11-25T10:00:03Z"),
        pod("p-c", "prefill", "10.0.0.3", created="2026-11-25T10:00:01Z"),
        pod("d-1", "decode", "10.0.0.9"),
    ]
    table = loads(tables(pods, HASH, ["prefill", "decode"]), "global.json")
    assert servers(table, "1") == ["10.0.0.3", "10.0.0.2", "10.0.0.1"]


@pytest.mark.parametrize(("annotation", "expected"), [
    (configuration((3, "29.1.3.1")), ((3,), ("29.1.3.1",))),
    (json.dumps({"devices": [{"device_id": "0"}]}), ((0,), ("",))),
    ("[]", None),
    (json.dumps({"devices": [{"device_id": "x"}]}), None),
])  # fmt: skip
def test_cards_from_the_device_plugins_annotation(annotation, expected):
    assert cards(pod("p", "prefill", annotation=annotation)) == expected
