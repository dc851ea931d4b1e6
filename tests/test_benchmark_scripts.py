"""The benchmark scripts keep up with the code they measure: each one starts (`--help`), and the
placement one (pure, a second) runs small and agrees with its baseline. The others need live
systems and are run by hand (benchmarks/README.md)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.stem)
def test_every_benchmark_script_starts(script):
    if '__name__ == "__main__"' not in script.read_text():  # a library of the others
        importlib.import_module(f"benchmarks.{script.stem}")
        return
    started = subprocess.run(
        [sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr  # sizing_vs_modelarts (pure) runs whole


def test_the_placement_benchmark_agrees_with_its_baseline():
    result = subprocess.run(
        [sys.executable, "benchmarks/placement.py", "--needs", "60", "--nodes", "8",
         "--rounds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "same answer as the baseline" in result.stdout, result.stdout
