"""vLLM's CPU venv (the process runtime's) and image (the Docker runtime's) let their
processes use AMX tiles: vLLM 0.32's CPU attention runs AMX instructions on a CPU that has
them without asking Linux first, and its engine died of SIGILL at its first request on such a
host (engine_images/vllm-cpu/install_venv.sh, amx_permission)."""

from __future__ import annotations

import ctypes
import platform
import subprocess
import sys

import pytest

from tests.system import require_runtime
from tests.vllm_support import VLLM_PYTHON

IMAGE = "wharf/vllm-cpu:0.32.0"
# What a process of the venv was granted as it started: arch_prctl(ARCH_GET_XCOMP_PERM).
GRANTED = (
    "import ctypes; v = ctypes.c_ulong(0); "
    "ctypes.CDLL(None).syscall(158, 0x1022, ctypes.byref(v)); print(v.value >> 18 & 1)"
)
HOOK = (  # the line the venv runs as each of its processes starts
    "import pathlib, sysconfig; site = pathlib.Path(sysconfig.get_paths()['purelib']); "
    "print((site / 'wharf-amx.pth').read_text())"
)


def kernel_has_amx_tiles() -> bool:
    """Whether this host's kernel offers AMX tile data (XTILEDATA, xstate bit 18)."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    offered = ctypes.c_ulong(0)
    if ctypes.CDLL(None).syscall(158, 0x1021, ctypes.byref(offered)) != 0:  # GET_XCOMP_SUPP
        return False
    return bool(offered.value >> 18 & 1)


def test_the_venv_asks_for_amx_tiles_as_each_of_its_processes_starts():
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM CPU venv at {VLLM_PYTHON}")
    hook = subprocess.run([str(VLLM_PYTHON), "-c", HOOK], capture_output=True, text=True)
    assert hook.stdout.strip() == "import wharf_amx", hook.stderr
    if not kernel_has_amx_tiles():
        pytest.skip("this host has no AMX tiles: nothing to ask for")
    granted = subprocess.run([str(VLLM_PYTHON), "-c", GRANTED], capture_output=True, text=True)
    assert granted.stdout.strip() == "1", granted.stderr
    # A Python without the hook has not asked, so the check above could fail.
    bare = subprocess.run([sys.executable, "-S", "-c", GRANTED], capture_output=True, text=True)
    assert bare.stdout.strip() == "0", bare.stderr


def test_the_image_asks_for_amx_tiles_as_each_of_its_processes_starts():
    require_runtime("docker")
    if not kernel_has_amx_tiles():
        pytest.skip("this host has no AMX tiles: nothing to ask for")
    granted = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", IMAGE, "/opt/vllm/bin/python", "-c",
         GRANTED],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert granted.stdout.strip() == "1", granted.stderr
