"""One model across two real Wharf nodes on this machine (process runtime, node addresses
127.0.0.21 and 127.0.0.22): vLLM's CPU build, pipeline parallel over the two members
(unit.size 2), answers at temperature 0 as the same model on one node does; a member killed
mid-serve takes the instance out of routing and the whole group starts again."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

import tests.fleet_nodes_support as support
from tests.fleet_nodes_support import wait_for
from tests.test_fleet_nodes import deploy, events, fleet, instances, system  # noqa: F401

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),
]
PROMPT = "The harbour master counts the ships"


def spec(name: str, group: str, size: int) -> dict:
    llm = {"engine": "vllm-cpu", "model": "tiny-llama", "served_model_name": f"{name}-model",
           "max_model_len": 2048, "max_num_seqs": 4}  # fmt: skip
    unit = {"unit": {"size": size}} if size > 1 else {}
    if size > 1:
        llm["pipeline_parallel_size"] = size
    return {"name": name, "llm": llm, **unit,
            "metadata": {"resource": group, "termination_grace_period": 2}}  # fmt: skip


def served(
    nodes: support.Fleet, name: str, count: int, timeout: float, exits: int = 0
) -> list[dict]:
    """Until `count` rows run with the leader (rank 0) ready; the rows, by rank. More than
    `exits` engine exits fail it at once, with the last one's log lines."""

    def up() -> list[dict] | None:
        ended = events(nodes.system, name, "InstanceExited")
        if len(ended) > exits:
            raise AssertionError(f"{name}: an engine exited: {ended[0]['message']}")
        rows = sorted(instances(nodes.system, name), key=lambda r: r["rank"])
        ok = len(rows) == count and rows[0]["state"] == "ready"
        ok = ok and all(r["state"] in ("ready", "starting") for r in rows)
        return rows if ok else None

    return wait_for(up, timeout, f"{name} serving", lambda: nodes.logs())


def complete(nodes: support.Fleet, name: str, token: str) -> httpx.Response:
    """A completion at temperature 0, once the gateways route the instance (its snapshot
    follows the leader's readiness by a publish)."""

    def routed() -> httpx.Response | None:
        answer = httpx.post(
            f"{nodes.system.stack.gateway_url}/v1/completions",
            headers={"Authorization": f"Bearer {token}"},
            json={"model": f"{name}-model", "prompt": PROMPT, "max_tokens": 8,
                  "temperature": 0, "ignore_eos": True},
            timeout=180,
        )  # fmt: skip
        return None if answer.status_code == 503 else answer

    return wait_for(routed, 30, f"{name} routed", lambda: nodes.logs())


def kill_member(rank: int, model_dir: Path) -> None:
    """SIGKILL the process group of the engine started as the member of `rank`."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ranked = b"--node-rank" in args and args[args.index(b"--node-rank") + 1] == b"%d" % rank
        if ranked and any(str(model_dir).encode() in a for a in args):
            os.killpg(os.getpgid(int(pid)), signal.SIGKILL)
            return
    raise AssertionError(f"no engine of rank {rank} runs")


def test_a_model_across_two_nodes_answers_as_on_one_and_restarts_whole(fleet):  # noqa: F811
    from controlplane.services.tiny_model import write_tiny_model

    models = fleet.home / "models"
    write_tiny_model(models / "tiny-llama")
    wide, one = f"vllm-{support.RUN}", f"pd-{support.RUN}"  # the groups granted
    fleet.add("g1", "127.0.0.21", labels=f"resource={wide}")
    fleet.add("g2", "127.0.0.22", labels=f"resource={wide}")
    fleet.add("g3", "127.0.0.23", labels=f"resource={one}")
    fleet.wait_ready(["g1", "g2", "g3"])
    wide_token = deploy(fleet.system, spec("wide", wide, 2))
    one_token = deploy(fleet.system, spec("one", one, 1))
    rows = served(fleet, "wide", 2, timeout=600)
    assert {r["node"] for r in rows} == {"g1", "g2"} and rows[0]["gang"] == rows[0]["name"]
    served(fleet, "one", 1, timeout=300)
    across = complete(fleet, "wide", wide_token)
    alone = complete(fleet, "one", one_token)
    assert across.status_code == 200 and alone.status_code == 200, (across.text, alone.text)
    assert across.json()["choices"][0]["text"] == alone.json()["choices"][0]["text"]

    kill_member(1, models)
    wait_for(lambda: events(fleet.system, "wide", "GangRestarting") or None, 60,
             "the whole group restarting", lambda: fleet.logs())  # fmt: skip
    served(fleet, "wide", 2, timeout=600, exits=2)  # the member killed, then the leader
    again = complete(fleet, "wide", wide_token)
    assert again.status_code == 200, again.text
    assert again.json()["choices"][0]["text"] == alone.json()["choices"][0]["text"]
