"""Limits by default (contracts.limits): every instance's plan names memory, CPU and pids limits
(the spec's, else the operator's defaults, per card), memory empty_dirs are sized and capped,
capabilities are dropped but those a plan needs; the Docker options carry them; the API
refuses a memory empty_dir above the cap with a 400 naming it. Real containers:
tests/test_docker_limits.py; pods: tests/test_kube_manifests.py, tests/kube."""

from __future__ import annotations

import pytest

from contracts.engines import render
from contracts.engines.plan import ContainerPlan, Mount, Placement
from contracts.env import envfloat, envint
from contracts.limits import TenantLimits, capped, granted_capabilities, limit_errors
from contracts.spec import parse_spec
from workers.runtimes.base import InstanceRequest
from workers.runtimes.docker import run_options

GIB, MIB = 1024**3, 1024**2
LIMITS = TenantLimits(memory_mb=2048, cpus=2, pids=512, memory_empty_dir_mb=1024)
CPU_SPEC = {"name": "tiny", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}
GPU_SPEC = {"name": "chat", "llm": {"engine": "vllm", "model": "qwen"}, "metadata": {"gpu": 1}}
# A custom engine with a 4 GB memory empty_dir.
MEMORY_CACHE = {
    "name": "echo",
    "containers": [{"image": "busybox", "command": "sleep 1d", "port": 8001}],
    "storage": [{"mount_path": "/cache", "empty_dir": {"medium": "memory", "size_limit": 4}}],
}
PD_SPEC = {
    "name": "pd",
    "llm": {"engine": "vllm", "model": "qwen",
            "pd": {"prefill": {"gpu": 1}, "decode": {"gpu": 4, "tensor_parallel_size": 4},
                   "kv_connector": "NixlConnector"}},
}  # fmt: skip


def plan_of(data: dict, limits: TenantLimits = LIMITS, role: str = "") -> ContainerPlan:
    return render(parse_spec(data), Placement(limits=limits, role=role, service=data["name"]))


@pytest.mark.parametrize(("data", "role", "cpus", "memory", "pids"), [
    # Defaults per card; an instance without cards counts once.
    (CPU_SPEC, "", 2, 2 * GIB, 512),
    (GPU_SPEC, "", 2, 2 * GIB, 512),
    ({**GPU_SPEC, "metadata": {"gpu": 4}}, "", 8, 8 * GIB, 2048),
    (PD_SPEC, "prefill", 2, 2 * GIB, 512),
    (PD_SPEC, "decode", 8, 8 * GIB, 2048),
    # The spec's own memory and CPU override the defaults, smaller or larger.
    ({**CPU_SPEC, "metadata": {"cpu": 0.5, "memory": 300}}, "", 0.5, 300 * MIB, 512),
    ({**GPU_SPEC, "metadata": {"gpu": 1, "cpu": 32, "memory": 65536}}, "", 32, 64 * GIB, 512),
    ({**CPU_SPEC, "metadata": {"memory": 300}}, "", 2, 300 * MIB, 512),
])  # fmt: skip
def test_every_plan_has_memory_cpu_and_pids_limits(data, role, cpus, memory, pids):
    plan = plan_of(data, role=role)
    assert (plan.cpus, plan.memory_bytes, plan.pids_limit) == (cpus, memory, pids)


def test_wharfs_own_defaults_where_the_operator_set_none():
    plan = render(parse_spec(CPU_SPEC))
    assert (plan.cpus, plan.memory_bytes, plan.pids_limit) == (8, 16 * GIB, 4096)


@pytest.mark.parametrize(("limits", "cards", "cpus"), [
    (TenantLimits(cpus=8), 0, 8),
    (TenantLimits(cpus=8), 4, 32),
    (TenantLimits(cpus=8, node_cpus=2), 0, 2),  # dockerd refuses more than the host has
    (TenantLimits(cpus=8, node_cpus=16), 4, 16),
    (TenantLimits(cpus=1.5, node_cpus=16), 2, 3),
])  # fmt: skip
def test_a_cpu_default_is_per_card_and_at_most_the_nodes(limits, cards, cpus):
    assert limits.default_cpus(cards) == cpus


@pytest.mark.parametrize(("mount", "size"), [
    (Mount("tmpfs", "/cache", read_only=False), GIB),  # no size: the cap
    (Mount("tmpfs", "/cache", size_bytes=GIB // 2, read_only=False), GIB // 2),
    (Mount("tmpfs", "/cache", size_bytes=4 * GIB, read_only=False), GIB),  # saved before
    (Mount("bind", "/models/m", "/srv/m"), None),  # not memory: as it was
    (Mount("nfs", "/data", "nas:/d"), None),
])  # fmt: skip
def test_a_memory_mount_is_sized_and_at_most_the_cap(mount, size):
    assert capped(mount, GIB).size_bytes == size


def test_a_rendered_memory_empty_dir_has_the_cap_where_it_names_no_size():
    data = {**CPU_SPEC, "storage": [{"mount_path": "/cache", "empty_dir": {"medium": "memory"}}]}
    (mount,) = [m for m in plan_of(data).mounts if m.kind == "tmpfs"]
    assert mount.size_bytes == 1024 * MIB


def scratch(path: str, **empty_dir) -> dict:
    return {**CPU_SPEC, "storage": [{"mount_path": "/x", "nfs": {"server": "n", "path": "/"}},
                                    {"mount_path": path, "empty_dir": empty_dir}]}  # fmt: skip


@pytest.mark.parametrize(("data", "refused"), [
    (scratch("/cache", medium="memory", size_limit=2), True),  # 2 GB > 1024 MB
    (scratch("/cache", medium="memory", size_limit=1), False),  # at the cap
    (scratch("/cache", medium="memory"), False),  # gets the cap
    (scratch("/cache", size_limit=50), False),  # on disk: not memory
    (scratch("/dev/shm", medium="memory", size_limit=16), False),  # shared memory: shm_size's
])  # fmt: skip
def test_a_memory_empty_dir_above_the_cap_is_refused_naming_it(data, refused):
    errors = limit_errors(parse_spec(data), LIMITS)
    assert list(errors) == (["storage[1].empty_dir.size_limit"] if refused else [])
    if refused:
        assert "1024 MB" in errors["storage[1].empty_dir.size_limit"][0]


@pytest.mark.parametrize(("port", "devices", "granted"), [
    (8000, (), ()),  # vLLM, CPU or CUDA (the NVIDIA runtime sets cards up from outside)
    (8000, ("/dev/davinci0", "/dev/davinci_manager"), ()),  # Ascend's device nodes
    (80, (), ("NET_BIND_SERVICE",)),  # TGI's image listens on 80
    (8000, ("/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"), ("IPC_LOCK",)),  # RDMA pins
    (443, ("/dev/infiniband/uverbs0",), ("IPC_LOCK", "NET_BIND_SERVICE")),
])  # fmt: skip
def test_capabilities_granted_are_only_those_the_plan_needs(port, devices, granted):
    plan = ContainerPlan("img", ["serve"], port, device_paths=devices)
    assert granted_capabilities(plan) == granted


def docker_options(plan: ContainerPlan, tmp_path, limits: TenantLimits | None = None) -> dict:
    request = InstanceRequest("svc", "svc-1", "h", plan)
    return run_options(request, model_dir=str(tmp_path), bind_address="127.0.0.1", limits=limits)


def test_docker_options_bound_every_container_and_drop_every_capability(tmp_path):
    opts = docker_options(plan_of(MEMORY_CACHE), tmp_path)
    assert {k: opts[k] for k in ("mem_limit", "memswap_limit", "nano_cpus", "pids_limit")} == {
        "mem_limit": 2 * GIB, "memswap_limit": 2 * GIB, "nano_cpus": 2 * 10**9,
        "pids_limit": 512,
    }  # fmt: skip
    assert (opts["security_opt"], opts["cap_drop"]) == (["no-new-privileges"], ["ALL"])
    assert "cap_add" not in opts
    assert opts["mounts"][0]["TmpfsOptions"] == {"SizeBytes": GIB}  # asked 4 GB, the cap


def test_docker_options_add_back_only_what_the_plan_needs(tmp_path):
    opts = docker_options(ContainerPlan("img", ["serve"], 80), tmp_path)
    assert (opts["cap_drop"], opts["cap_add"]) == (["ALL"], ["NET_BIND_SERVICE"])


def test_a_plan_rendered_elsewhere_gets_the_runtimes_defaults(tmp_path):
    plan = ContainerPlan("img", ["serve"], 8000, gpus=(0, 1),
                         mounts=[Mount("tmpfs", "/t", read_only=False)])  # fmt: skip
    opts = docker_options(plan, tmp_path, LIMITS)
    assert (opts["mem_limit"], opts["nano_cpus"], opts["pids_limit"]) == (4 * GIB, 4 * 10**9, 1024)
    assert opts["mounts"][0]["TmpfsOptions"] == {"SizeBytes": GIB}


@pytest.mark.parametrize(("value", "reader"), [
    ("lots", lambda: envint("WHARF_PIDS_LIMIT", 4096, minimum=64)),
    ("0", lambda: envint("WHARF_PIDS_LIMIT", 4096, minimum=64)),
    ("-2", lambda: envfloat("WHARF_PIDS_LIMIT", 8.0, minimum=0.01)),
    ("nan", lambda: envfloat("WHARF_PIDS_LIMIT", 8.0, minimum=0.01)),
])  # fmt: skip
def test_a_bad_setting_stops_start_up_naming_the_variable(monkeypatch, value, reader):
    monkeypatch.setenv("WHARF_PIDS_LIMIT", value)
    with pytest.raises(ValueError, match=f"WHARF_PIDS_LIMIT must be .* not '{value}'"):
        reader()


def test_a_good_setting_is_read(monkeypatch):
    monkeypatch.setenv("WHARF_DEFAULT_CPUS", "2.5")
    assert envfloat("WHARF_DEFAULT_CPUS", 8.0, minimum=0.01) == 2.5


# --- the API -----------------------------------------------------------------------------------


def test_the_api_refuses_a_memory_empty_dir_above_the_operators_cap(api, settings):
    settings.WHARF_MEMORY_EMPTY_DIR_MAX_MB = 2048
    for path in ("/api/v1/services/preview", "/api/v1/services"):
        response = api.post(path, MEMORY_CACHE, format="json")
        assert response.status_code == 400, response.content
        (message,) = response.json()["errors"]["storage[0].empty_dir.size_limit"]
        assert "2048 MB" in message and "WHARF_MEMORY_EMPTY_DIR_MAX_MB" in message


def test_the_preview_shows_the_limits_the_instance_will_run_under(api, settings):
    settings.WHARF_MEMORY_EMPTY_DIR_MAX_MB = 8192
    settings.WHARF_DEFAULT_MEMORY_MB, settings.WHARF_DEFAULT_CPUS = 1024, 1.5
    settings.WHARF_PIDS_LIMIT = 300
    response = api.post("/api/v1/services/preview", MEMORY_CACHE, format="json")
    assert response.status_code == 200, response.content
    (container,) = response.json()["containers"]
    assert (container["memory_bytes"], container["cpus"], container["pids_limit"]) == (
        GIB,
        1.5,
        300,
    )
    assert [m["size_bytes"] for m in container["mounts"]] == [4 * GIB]
