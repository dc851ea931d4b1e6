"""GPU and NPU discovery on this host, and exclusive allocation of card indexes.

Two instances must never share a card: on Ascend a second container bound to the same NPU
cannot use it at all, and on NVIDIA two engines each reserving 90% of memory crash each other.
So allocation is exclusive and decided from what the runtime reports as running (the runtime
is the source of truth; an instance carries its cards as an ``encode_allocation`` label).

Indexes are the ones the vendor tools print: nvidia-smi's index (what ``docker --gpus
device=N`` means; CUDA_VISIBLE_DEVICES agrees only with CUDA_DEVICE_ORDER=PCI_BUS_ID) and
npu-smi's NPU ID (what /dev/davinciN and ASCEND_RT_VISIBLE_DEVICES mean on 910-series hosts).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

log = logging.getLogger(__name__)


NVIDIA_SMI_ARGS = (
    "--query-gpu=index,uuid,name,memory.total,memory.used,pci.bus_id",
    "--format=csv,noheader,nounits",
)
NPU_SMI_ARGS = ("info",)
# nvidia-smi answers in ~100 ms, npu-smi in about a second; a hung driver must not hang us.
DISCOVERY_TIMEOUT = 15.0
CACHE_TTL = 30.0


@dataclass(frozen=True)
class Device:
    kind: str  # "gpu" | "npu"
    index: int
    name: str
    memory_mb: int  # total card memory (HBM for NPUs)
    uuid: str = ""
    # An NPU's RoCE address (`hccn_tool -i <index> -ip -g`), which prefill/decode rank tables
    # list; "" for GPUs and where the tool is missing or the card has none.
    ip: str = ""


# --- nvidia-smi --------------------------------------------------------------------------------


def _int_or_zero(text: str) -> int:
    """nvidia-smi prints "[N/A]" or "[Not Supported]" for memory on some cards (MIG, vGPU)."""
    try:
        return int(float(text))
    except ValueError:
        return 0


def parse_nvidia_smi(csv_text: str) -> list[Device]:
    """Rows of ``index, uuid, name, memory.total, memory.used, pci.bus_id`` (csv, noheader,
    nounits). Lines that are not such rows (a header, "No devices were found", driver errors)
    are skipped. Fields are counted from both ends so a comma in a name cannot shift them."""
    devices = []
    for line in csv_text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 6 or not fields[0].isdecimal():
            continue
        name = ", ".join(fields[2:-3])
        devices.append(Device("gpu", int(fields[0]), name, _int_or_zero(fields[-3]), fields[1]))
    return devices


# --- npu-smi info ------------------------------------------------------------------------------

# npu-smi prints two rows per NPU:
#   | 0     910B3               | OK            | 93.6        41                0    / 0   |
#   | 0                         | 0000:C1:00.0  | 0           0    / 0          3374 / 65536 |
# and then a process table whose rows ("| 0       0  | 2213761 | python3.9 | 28915 |") look
# much like chip rows, so parsing stops at that table's header.
_NAME_CELL = re.compile(r"^(\d+)\s+(\S.*)$")
_CHIP_CELL = re.compile(r"^(\d+)(?:\s+(\d+))?$")
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_USAGE = re.compile(r"(\d+)\s*/\s*(\d+)")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _is_process_header(cells: list[str]) -> bool:
    return len(cells) >= 2 and cells[1].startswith("Process")


def _chip_memory_mb(usage_cell: str) -> int:
    """The last "used / total" pair with a total: HBM on 910-series rows (after DDR
    Memory-Usage, which is 0 / 0 on 910B), or Memory-Usage on cards without HBM (310P)."""
    totals = [int(total) for _, total in _USAGE.findall(usage_cell)]
    return next((t for t in reversed(totals) if t > 0), 0)


def _chip_device(name_row: tuple[int, str], cells: list[str]) -> Device | None:
    """The device a chip row describes, or None when the row is not one."""
    chip = _CHIP_CELL.match(cells[0]) if len(cells) >= 3 else None
    if chip is None or not _BUS_ID.match(cells[1]):
        return None
    npu_id, name = name_row
    # Multi-chip cards (310P Duo) print "Chip  Device": the logical device id is what
    # /dev/davinciN uses there; on 910-series hosts it is the NPU ID.
    index = int(chip.group(2)) if chip.group(2) is not None else npu_id
    return Device("npu", index, name, _chip_memory_mb(cells[2]))


def parse_npu_smi(text: str) -> list[Device]:
    """Devices from ``npu-smi info``'s table; anything else (banner, rules, process table,
    error text) is ignored."""
    devices = []
    name_row: tuple[int, str] | None = None
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            continue  # "+----+" and "+====+" rules, blank lines, error messages
        cells = _cells(line)
        if _is_process_header(cells):
            break
        named = _NAME_CELL.match(cells[0]) if len(cells) >= 3 else None
        if named and not _BUS_ID.match(cells[1]):
            name_row = (int(named.group(1)), named.group(2).strip())
            continue
        device = _chip_device(name_row, cells) if name_row else None
        if device:
            devices.append(device)
    return devices


# --- discovery ---------------------------------------------------------------------------------

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def run_tool(tool: str, args: Sequence[str], run: Runner, timeout: float) -> str | None:
    """The tool's stdout, or None when it is not installed or fails; never raises, because a
    broken driver on one node must not stop the worker (it simply offers no cards)."""
    path = shutil.which(tool)
    if path is None:
        return None
    try:
        # errors="replace": a stray non-UTF-8 byte in a card name must not cost us the cards.
        argv = [path, *args]
        result = run(argv, capture_output=True, text=True, errors="replace", timeout=timeout)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        log.warning("%s failed: %s; assuming no cards of its kind", tool, exc)
        return None
    if result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip()[:300]
        log.warning("%s exited %s: %s; assuming no cards", tool, result.returncode, detail)
        return None
    return result.stdout


def discover(run: Runner = subprocess.run, timeout: float = DISCOVERY_TIMEOUT) -> list[Device]:
    """Every GPU (nvidia-smi) and NPU (npu-smi) on this host; [] where neither tool is on
    PATH. ``run`` is subprocess.run's signature, replaceable for tests."""
    devices: list[Device] = []
    gpu_text = run_tool("nvidia-smi", NVIDIA_SMI_ARGS, run, timeout)
    if gpu_text is not None:
        devices += parse_nvidia_smi(gpu_text)
    npu_text = run_tool("npu-smi", NPU_SMI_ARGS, run, timeout)
    if npu_text is not None:
        devices += [with_roce_ip(npu, run, timeout) for npu in parse_npu_smi(npu_text)]
    return devices


_IPADDR = re.compile(r"^\s*ipaddr\s*:\s*(\S+)", re.MULTILINE)


def parse_hccn_ip(text: str) -> str:
    """The address in ``hccn_tool -i N -ip -g``'s answer ("ipaddr:29.18.8.10" and a
    netmask line); "" when it has none."""
    found = _IPADDR.search(text)
    return found.group(1) if found else ""


def with_roce_ip(npu: Device, run: Runner, timeout: float) -> Device:
    text = run_tool("hccn_tool", ("-i", str(npu.index), "-ip", "-g"), run, timeout)
    ip = parse_hccn_ip(text) if text else ""
    return replace(npu, ip=ip) if ip else npu


class DeviceCache:
    """discover() remembered for ``ttl`` seconds: cards rarely come and go, and the
    reconciler asks on every pass. ``now`` is injectable so expiry is testable."""

    def __init__(
        self,
        discover_fn: Callable[[], list[Device]] = discover,
        ttl: float = CACHE_TTL,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.discover_fn = discover_fn
        self.ttl = ttl
        self.clock = clock
        self._taken_at: float | None = None
        self._devices: tuple[Device, ...] = ()

    def get(self, now: float | None = None) -> list[Device]:
        now = self.clock() if now is None else now
        if self._taken_at is None or now - self._taken_at >= self.ttl or now < self._taken_at:
            self._devices = tuple(self.discover_fn())
            self._taken_at = now
        return list(self._devices)

    def clear(self) -> None:
        self._taken_at = None


# --- a block of cards --------------------------------------------------------------------------


def first_contiguous(free: Sequence[int], count: int) -> tuple[int, ...] | None:
    """The lowest run of ``count`` consecutive indexes in sorted ``free``: neighbouring cards
    usually share a PCIe switch or HCCS/NVLink group, so a block talks faster than a spread."""
    for start in range(len(free) - count + 1):
        if free[start + count - 1] - free[start] == count - 1:
            return tuple(free[start : start + count])
    return None


# --- what an instance holds, as a label -------------------------------------------------------
