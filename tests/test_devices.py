"""Device discovery and allocation, from recorded nvidia-smi / npu-smi output."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from contracts.allocation import decode_allocation, encode_allocation
from workers.nodes.devices import (
    NVIDIA_SMI_ARGS,
    Device,
    DeviceCache,
    discover,
    first_contiguous,
    parse_hccn_ip,
    parse_npu_smi,
    parse_nvidia_smi,
)

FIXTURES = Path(__file__).parent / "fixtures" / "devices"
H100 = FIXTURES / "nvidia_smi_8xh100.csv"
A10 = FIXTURES / "nvidia_smi_2xa10.csv"
NPU_32G = FIXTURES / "npu_smi_8x910b4_32g.txt"
NPU_64G = FIXTURES / "npu_smi_8x910b3_64g.txt"

# What npu-smi prints in a container that lacks the driver mounts (exit status is non-zero).
NPU_SMI_DCMI_ERROR = (
    "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\n"
    "dcmi module initialize failed. ret is -8005\n"
)
NVIDIA_SMI_NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)


def gpus(n: int, name: str = "NVIDIA H100 80GB HBM3") -> list[Device]:
    return [Device("gpu", i, name, 81559) for i in range(n)]


# --- parsing ------------------------------------------------------------------------------------


def test_parse_nvidia_smi_8x_h100():
    devices = parse_nvidia_smi(H100.read_text())
    assert [d.index for d in devices] == list(range(8))
    assert {d.kind for d in devices} == {"gpu"}
    assert {d.name for d in devices} == {"NVIDIA H100 80GB HBM3"}
    assert {d.memory_mb for d in devices} == {81559}
    assert devices[0].uuid == "GPU-6513270e-269e-0d37-f2a7-4de452e6b438"
    assert len({d.uuid for d in devices}) == 8


def test_parse_nvidia_smi_2x_a10():
    devices = parse_nvidia_smi(A10.read_text())
    assert [(d.index, d.name, d.memory_mb) for d in devices] == [
        (0, "NVIDIA A10", 23028),
        (1, "NVIDIA A10", 23028),
    ]


def test_parse_nvidia_smi_tolerates_header_na_memory_and_commas_in_names():
    text = (
        "index, uuid, name, memory.total [MiB], memory.used [MiB], pci.bus_id\n"
        "0, GPU-aaaa, NVIDIA A100-SXM4-40GB, [N/A], [N/A], 00000000:07:00.0\n"
        "1, GPU-bbbb, Odd, Name, 16384, 0, 00000000:08:00.0\n"
    )
    assert parse_nvidia_smi(text) == [
        Device("gpu", 0, "NVIDIA A100-SXM4-40GB", 0, "GPU-aaaa"),
        Device("gpu", 1, "Odd, Name", 16384, "GPU-bbbb"),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "No devices were found\n",
        NVIDIA_SMI_NO_DRIVER,
        "0, 1, 2\n",
        "\x00\xff",
        "², a, b, 1, 2, 3",
    ],
)
def test_parse_nvidia_smi_empty_or_garbage(text):
    assert parse_nvidia_smi(text) == []


def test_parse_npu_smi_8x_910b_32g_skips_process_table():
    devices = parse_npu_smi(NPU_32G.read_text())
    # Eight NPUs, not twelve: the process table's "| 0       0 | 2213761 | ..." rows are ignored.
    assert [d.index for d in devices] == list(range(8))
    assert {d.kind for d in devices} == {"npu"}
    assert {d.name for d in devices} == {"910B4"}
    assert {d.memory_mb for d in devices} == {32768}  # HBM total, not used, not DDR (0)
    assert {d.uuid for d in devices} == {""}


def test_parse_npu_smi_910b_64g():
    devices = parse_npu_smi(NPU_64G.read_text())
    assert [(d.index, d.name, d.memory_mb) for d in devices] == [
        (i, "910B3", 65536) for i in range(8)
    ]


def test_parse_npu_smi_multi_chip_card_uses_logical_device_id():
    # Atlas 300I Duo: two chips per card, "Chip  Device" columns, DDR memory only (no HBM).
    text = """\
| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===============================+=================+======================================================+
| 1       310P3                 | OK              | NA           53                0     / 0             |
| 0       0                     | 0000:01:00.0    | 0            1661 / 44280                            |
| 1       1                     | 0000:01:00.0    | 0            1432 / 43693                            |
+===============================+=================+======================================================+
"""  # noqa: E501 (a recorded table row)
    assert parse_npu_smi(text) == [
        Device("npu", 0, "310P3", 44280),
        Device("npu", 1, "310P3", 43693),
    ]


@pytest.mark.parametrize(
    "text",
    ["", NPU_SMI_DCMI_ERROR, "| a | b | c |\n", "| 0     910B3 | OK | 1 |\n", "+-----+\n", "|||"],
)
def test_parse_npu_smi_empty_or_garbage(text):
    assert parse_npu_smi(text) == []


def test_parsers_do_not_cross():
    assert parse_npu_smi(H100.read_text()) == []
    assert parse_nvidia_smi(NPU_32G.read_text()) == []


# --- allocation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("free", "count", "block"), [
    ([0, 1, 2, 3], 2, (0, 1)), ([1, 2, 3, 5], 2, (1, 2)), ([0, 2, 3, 4], 3, (2, 3, 4)),
    ([0, 2, 4, 6], 2, None), ([], 1, None), ([3], 1, (3,)),
])  # fmt: skip
def test_first_contiguous_is_the_lowest_run(free, count, block):
    assert first_contiguous(free, count) == block


@pytest.mark.parametrize(
    ("kind", "indexes", "text"),
    [("gpu", (0, 1), "gpu:0,1"), ("npu", (4,), "npu:4"), ("npu", (0, 1, 2, 3), "npu:0,1,2,3")],
)
def test_allocation_round_trip(kind, indexes, text):
    assert encode_allocation(kind, indexes) == text
    assert decode_allocation(text) == (kind, indexes)


def test_no_allocation_is_empty():
    assert encode_allocation("gpu", ()) == ""
    assert decode_allocation("") == ("", ())
    assert decode_allocation("  ") == ("", ())


@pytest.mark.parametrize("text", ["gpu", "tpu:0", "gpu:a,b", "gpu:-1", ":0", "0,1"])
def test_decode_malformed_raises(text):
    with pytest.raises(ValueError):
        decode_allocation(text)


def test_encode_invalid_raises():
    with pytest.raises(ValueError):
        encode_allocation("tpu", (0,))
    with pytest.raises(ValueError):
        encode_allocation("gpu", (-1,))


def _tool_dir(tmp_path: Path, *tools: str, body: str = "exit 0") -> Path:
    """A directory holding executables with the tools' names, for shutil.which to find."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in tools:
        script = bin_dir / tool
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _recorded_run(outputs: dict[str, tuple[int, str]], calls: list[list[str]]):
    """A stand-in for subprocess.run answering with recorded output per tool."""

    def run(argv, **kwargs):
        calls.append(list(argv))
        assert kwargs["timeout"] > 0  # a hung driver must not hang discovery
        code, out = outputs[os.path.basename(argv[0])]
        return subprocess.CompletedProcess(argv, code, stdout=out, stderr="")

    return run


def test_discover_with_recorded_outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, "nvidia-smi", "npu-smi")))
    calls: list[list[str]] = []
    outputs = {"nvidia-smi": (0, A10.read_text()), "npu-smi": (0, NPU_64G.read_text())}
    devices = discover(run=_recorded_run(outputs, calls))
    assert [(d.kind, d.index) for d in devices] == [("gpu", 0), ("gpu", 1)] + [
        ("npu", i) for i in range(8)
    ]
    assert calls[0] == [str(tmp_path / "bin" / "nvidia-smi"), *NVIDIA_SMI_ARGS]
    assert calls[1] == [str(tmp_path / "bin" / "npu-smi"), "info"]


def test_discover_only_runs_tools_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, "npu-smi")))
    calls: list[list[str]] = []
    devices = discover(run=_recorded_run({"npu-smi": (0, NPU_32G.read_text())}, calls))
    assert len(devices) == 8 and {d.kind for d in devices} == {"npu"}
    assert len(calls) == 1


def test_discover_without_tools(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))

    def never(*args, **kwargs):
        raise AssertionError("no tool is on PATH, so nothing should run")

    assert discover(run=never) == []


def test_discover_failing_tool_is_logged_and_means_none(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, "nvidia-smi", "npu-smi")))
    outputs = {"nvidia-smi": (9, NVIDIA_SMI_NO_DRIVER), "npu-smi": (0, NPU_32G.read_text())}
    with caplog.at_level(logging.WARNING, logger="workers.nodes.devices"):
        devices = discover(run=_recorded_run(outputs, []))
    assert {d.kind for d in devices} == {"npu"}  # one broken tool does not hide the other
    assert "nvidia-smi exited 9" in caplog.text
    assert "couldn't communicate with the NVIDIA driver" in caplog.text


def test_discover_run_raising_never_propagates(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, "nvidia-smi", "npu-smi")))

    def broken(argv, **kwargs):
        if argv[0].endswith("nvidia-smi"):
            raise subprocess.TimeoutExpired(argv, kwargs["timeout"])
        raise PermissionError(13, "Permission denied", argv[0])

    with caplog.at_level(logging.WARNING, logger="workers.nodes.devices"):
        assert discover(run=broken) == []
    assert "nvidia-smi failed" in caplog.text and "npu-smi failed" in caplog.text


def test_discover_runs_real_tools_from_path(tmp_path, monkeypatch):
    # Real subprocesses: executables named like the vendor tools print the recordings (plus a
    # byte that is not UTF-8, which must not lose the cards).
    bin_dir = _tool_dir(tmp_path, "nvidia-smi", body=f'printf "\\377\\n"; exec cat "{H100}"')
    _tool_dir(tmp_path, "npu-smi", body=f'exec cat "{NPU_32G}"')
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    devices = discover()
    assert len([d for d in devices if d.kind == "gpu"]) == 8
    assert len([d for d in devices if d.kind == "npu"]) == 8


def test_discover_reads_each_npus_roce_address_with_hccn_tool(tmp_path, monkeypatch):
    # A real hccn_tool stand-in answering as the driver's does, for cards 0-3 only (4-7: a
    # card without an address answers with an error, and the card keeps none).
    bin_dir = _tool_dir(tmp_path, "npu-smi", body=f'exec cat "{NPU_32G}"')
    _tool_dir(tmp_path, "hccn_tool", body=(
        'if [ "$2" -lt 4 ]; then printf "ipaddr:29.18.8.1%s\\nnetmask:255.255.255.0\\n" "$2"; '
        'else echo "hccn_tool: get ip failed" >&2; exit 1; fi'
    ))  # fmt: skip
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    ips = {d.index: d.ip for d in discover()}
    assert ips == {0: "29.18.8.10", 1: "29.18.8.11", 2: "29.18.8.12", 3: "29.18.8.13",
                   4: "", 5: "", 6: "", 7: ""}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "ip"),
    [
        ("ipaddr:29.18.8.10\nnetmask:255.255.255.0\n", "29.18.8.10"),
        ("ipaddr : 10.0.0.7\n", "10.0.0.7"),
        ("netmask:255.255.255.0\n", ""),
        ("", ""),
    ],
)
def test_parse_hccn_ip(text, ip):
    assert parse_hccn_ip(text) == ip


def test_discover_real_tool_timeout_and_failure(tmp_path, monkeypatch, caplog):
    bin_dir = _tool_dir(tmp_path, "nvidia-smi", body="exec sleep 30")
    _tool_dir(tmp_path, "npu-smi", body=f"echo '{NPU_SMI_DCMI_ERROR.splitlines()[1]}' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="workers.nodes.devices"):
        assert discover(timeout=0.5) == []
    assert time.monotonic() - started < 10
    assert "timed out" in caplog.text
    assert "dcmi module initialize failed" in caplog.text


def test_discover_on_this_machine():
    # The real thing, with the real PATH; CI and dev machines here have no cards.
    devices = discover()
    if shutil.which("nvidia-smi") is None and shutil.which("npu-smi") is None:
        assert devices == []
    else:  # pragma: no cover - only on a host with accelerators
        assert all(d.kind in ("gpu", "npu") and d.memory_mb >= 0 for d in devices)


# --- cache --------------------------------------------------------------------------------------


def test_cache_reuses_within_ttl_and_refreshes_after():
    results = [gpus(2), gpus(1)]
    calls = []

    def fake_discover():
        calls.append(1)
        return results[len(calls) - 1]

    cache = DeviceCache(fake_discover, ttl=30.0)
    assert len(cache.get(now=100.0)) == 2
    assert len(cache.get(now=129.9)) == 2
    assert len(calls) == 1
    assert len(cache.get(now=130.0)) == 1  # a card vanished: seen after the TTL
    assert len(calls) == 2


def test_cache_clear_and_clock_going_backwards():
    calls = []

    def fake_discover():
        calls.append(1)
        return []

    cache = DeviceCache(fake_discover, ttl=30.0, clock=lambda: 50.0)
    cache.get()
    cache.get()
    assert len(calls) == 1
    cache.clear()
    cache.get()
    assert len(calls) == 2
    cache.get(now=10.0)  # earlier than the entry: don't trust it
    assert len(calls) == 3


def test_cache_returns_a_copy():
    cache = DeviceCache(lambda: gpus(2))
    cache.get(now=0.0).clear()
    assert len(cache.get(now=1.0)) == 2
