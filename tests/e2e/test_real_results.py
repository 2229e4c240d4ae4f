"""A results.json produced on a real NVIDIA H200 host (bench/gpu_host_smoke.sh, 2026-11-29):
the gate against the bundled simulator on --target-device cuda:0, with the real preflight fingerprint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from paths import TESTS

from ds4ci.evidence import results

REAL = TESTS / "data" / "real" / "h200-sim-cuda.results.json"


def test_real_h200_results_validate_and_carry_the_fingerprint() -> None:
    doc = results.load(REAL)
    assert doc["verdict"] == "pass" and doc["settings"]["target_device"] == "cuda:0"
    (gpu,) = doc["fingerprint"]["gpus"]
    assert (gpu["name"], gpu["arch"], gpu["memory_mib"], gpu["driver"]) == ("NVIDIA H200", "sm_90", 143771, "580.159.04")
    assert doc["fingerprint"]["health"]["status"] == "ok"


def test_report_renders_the_real_hardware() -> None:
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ds4ci"), "report", "--format", "summary", str(REAL)],  # the full report
        capture_output=True, text=True, check=True
    ).stdout
    assert "NVIDIA H200" in out and ("sm&#95;90" in out or "sm_90" in out)
    assert "580.159.04" in out
