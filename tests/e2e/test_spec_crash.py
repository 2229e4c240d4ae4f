"""A speculative arm that crashes while target-only passed: the run's reason says that first, each quoted log is
labelled with its arm, and an arm that printed nothing has no empty quote (real server processes on loopback)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from gatekit import DS4CI, FOREIGN_SERVER, GateRun, Workspace


def _report(run: GateRun, fmt: str) -> str:
    assert run.results is not None
    results = Path(run.results["evidence"]["dir"]) / "results.json"
    return subprocess.run([DS4CI, "report", "--format", fmt, str(results)], capture_output=True, text=True,
                          check=True, timeout=120).stdout


def test_a_silent_crash_of_every_speculative_arm_is_said_per_arm_with_no_empty_quote(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    ws.server = FOREIGN_SERVER
    run = ws.gate(env=ws.env(FOREIGN_BEHAVIOUR="crash-on-spec-request"), widths="2,3,4")
    assert run.code == 3, run.stdout + run.stderr
    assert run.results is not None and run.results["target_only"]["verdict"] == "pass"
    assert [r.split(": ", 1)[0] for r in run.results["reasons"]] == [
        f"target-only passed; reference-exact q={q} crashed" for q in (2, 3, 4)]
    for reason in run.results["reasons"]:
        assert "server exited with code 9" in reason and reason.endswith("(the server printed nothing)"), reason
        assert "\n" not in reason and "empty logs" not in reason
    for fmt in ("comment", "summary"):
        text = _report(run, fmt)
        assert "<summary>Quoted with" not in text and "empty logs" not in text and "```text" not in text.split(
            "Reproduce")[0], text


def test_each_quoted_log_is_labelled_with_its_arm(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate(faults="exit-mid-request@spec", widths="2,3")
    assert run.code == 3, run.stdout + run.stderr
    assert run.results is not None
    assert [r.splitlines()[0].split(": ", 1)[0] for r in run.results["reasons"]] == [
        "target-only passed; reference-exact q=2 crashed", "target-only passed; reference-exact q=3 crashed"]
    summary = _report(run, "summary")
    labels = re.findall(r"<details><summary>(Log of [^<]*|Quoted[^<]*)</summary>", summary)
    assert labels == ["Log of reference-exact q=2, quoted with its reason",
                      "Log of reference-exact q=3, quoted with its reason"], summary
    assert "GGML_ASSERT: simulated device fault while decoding" in summary


def test_a_crash_after_target_only_failed_is_not_called_one_after_a_pass(tmp_path: Path) -> None:
    """Target-only itself crashing: no width is judged, and nothing says target-only passed."""
    ws = Workspace.create(tmp_path)
    ws.server = FOREIGN_SERVER
    run = ws.gate(env=ws.env(FOREIGN_BEHAVIOUR="crash-on-request"), widths="2")
    assert run.code == 3, run.stdout + run.stderr
    assert run.results is not None and not any("target-only passed" in r for r in run.results["reasons"])
