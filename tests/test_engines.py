import pytest

from contracts.engines import Placement, render
from contracts.engines.plan import GangMember
from contracts.spec import parse_spec


def spec(**llm):
    return parse_spec(
        {
            "name": "svc",
            "llm": {"engine": "vllm-cpu", "model": "tiny-llama", **llm},
            "metadata": {"shm_size": 2, "cpu": 2, "memory": 4096},
        }
    )


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_vllm_command_is_rendered_from_the_llm_section():
    plan = render(spec(served_model_name="tiny", max_model_len=512, max_num_seqs=4))
    assert plan.args[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag(plan.args, "--model") == "/models/tiny-llama"
    i = plan.args.index("--served-model-name")
    assert plan.args[i + 1 : i + 3] == ["tiny", "svc"]  # the engine answers to both names
    assert flag(plan.args, "--max-model-len") == "512"
    assert flag(plan.args, "--max-num-seqs") == "4"
    assert flag(plan.args, "--port") == "8000"
    assert plan.image == "wharf/vllm-cpu:0.32.0"


def test_vllm_cpu_runs_eager_with_a_small_kv_cache():
    plan = render(spec())
    assert "--enforce-eager" in plan.args
    assert plan.env["VLLM_CPU_KVCACHE_SPACE"] == "1"


@pytest.mark.parametrize(
    ("env", "gang", "expected"),
    [
        ([], None, "0"),  # the worker in the engine core's process: two torch imports, not three
        ([{"name": "VLLM_ENABLE_V1_MULTIPROCESSING", "value": "1"}], None, "1"),  # the spec's own
        ([], GangMember(0, 2, "10.0.0.1", 29600, "10.0.0.1"), None),  # a stage needs vLLM's own
    ],
)
def test_vllm_cpu_runs_its_worker_in_the_engine_cores_process(env, gang, expected):
    data = {"name": "svc", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"},
            "containers": [{"image": "wharf/vllm-cpu:0.32.0", "env": env}]}  # fmt: skip
    if gang:
        data["unit"] = {"size": 2}
        data["llm"]["pipeline_parallel_size"] = 2
    plan = render(parse_spec(data), Placement(gang=gang))
    assert plan.env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == expected


def test_gpu_memory_utilization_is_passed_to_cuda_vllm_only():
    llm = {"engine": "vllm", "model": "m", "gpu_memory_utilization": 0.85}
    cuda = render(parse_spec({"name": "s", "llm": llm, "metadata": {"gpu": 1}}))
    assert flag(cuda.args, "--gpu-memory-utilization") == "0.85"
    assert "--gpu-memory-utilization" not in render(spec(gpu_memory_utilization=0.85)).args


def test_extra_args_come_last_verbatim():
    plan = render(spec(extra_args=["--seed", "7"]))
    assert plan.args[-2:] == ["--seed", "7"]


def test_model_store_is_mounted_read_only():
    (mount,) = render(spec(), Placement(model_store="/srv/models")).mounts
    assert (mount.kind, mount.source, mount.target, mount.read_only) == (
        "bind", "/srv/models/tiny-llama", "/models/tiny-llama", True,
    )  # fmt: skip


def test_process_placement_points_at_the_host_model_store_and_port():
    placement = Placement(
        in_container=False, model_store="/srv/models", host="127.0.0.1", port=41000
    )
    plan = render(spec(), placement)
    assert plan.mounts == []
    assert flag(plan.args, "--model") == "/srv/models/tiny-llama"
    assert flag(plan.args, "--port") == "41000"
    assert flag(plan.args, "--host") == "127.0.0.1"


def test_resources_and_shared_memory_come_from_metadata():
    plan = render(spec())
    assert plan.shm_size_bytes == 2 * 1024**3
    assert plan.cpus == 2
    assert plan.memory_bytes == 4096 * 1024**2


def test_given_command_is_used_verbatim():
    plan = render(
        parse_spec(
            {
                "name": "s",
                "containers": [{"image": "img:1", "command": "serve --port 8001", "port": 8001}],
                "storage": [{"mount_path": "/dev/shm", "empty_dir": {"medium": "memory",
                                                                      "size_limit": 4}}],
            }
        )
    )  # fmt: skip
    assert plan.args == ["/bin/sh", "-c", "serve --port 8001"]
    assert plan.image == "img:1"
    assert plan.port == 8001
    assert plan.shm_size_bytes == 4 * 1024**3


def test_memory_empty_dir_becomes_a_tmpfs():
    plan = render(
        parse_spec({"name": "s", "containers": [{"image": "i", "command": "c"}],
                    "storage": [{"mount_path": "/cache", "empty_dir": {"medium": "memory",
                                                                       "size_limit": 1}}]})
    )  # fmt: skip
    (mount,) = plan.mounts
    assert (mount.kind, mount.target, mount.size_bytes) == ("tmpfs", "/cache", 1024**3)


def test_vllm_gets_a_gigabyte_of_shared_memory_unless_the_spec_says_otherwise():
    plan = render(parse_spec({"name": "s", "llm": {"engine": "vllm-cpu", "model": "m"}}))
    assert plan.shm_size_bytes == 1024**3


def test_vllm_never_reaches_for_a_model_hub():
    assert render(spec()).env["HF_HUB_OFFLINE"] == "1"


def test_an_edited_command_keeps_the_model_mount():
    edited = parse_spec(
        {"name": "s", "containers": [{"image": "wharf/vllm-cpu:0.32.0", "command": "vllm ..."}],
         "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}
    )  # fmt: skip
    (mount,) = render(edited, Placement(model_store="/srv/models")).mounts
    assert (mount.source, mount.target) == ("/srv/models/tiny-llama", "/models/tiny-llama")
