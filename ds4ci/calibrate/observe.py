"""The GPU and driver a calibration ran on, as the vendor's tool reports them (``unknown`` where none answers)."""

from __future__ import annotations

import shutil
import subprocess

UNKNOWN = "unknown"
_TOOLS = (
    ("nvidia-smi", ("--query-gpu=name,driver_version", "--format=csv,noheader")),
    ("rocm-smi", ("--showproductname", "--showdriverversion", "--csv")),
)


def _ask(tool: str, args: tuple[str, ...]) -> str | None:
    path = shutil.which(tool)
    if path is None:
        return None
    try:
        done = subprocess.run([path, *args], capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = done.stdout.strip()
    return text[:2000] if done.returncode == 0 and text else None


def observe_gpu() -> dict[str, str]:
    """``{"tool": ..., "report": ...}``: the first vendor tool that answers, its report as printed."""
    for tool, args in _TOOLS:
        report = _ask(tool, args)
        if report is not None:
            return {"tool": tool, "report": report}
    return {"tool": UNKNOWN, "report": UNKNOWN}
