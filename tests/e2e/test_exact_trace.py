"""The real gate, sandboxed, against the simulator writing the exact-differential trace (DFLASH_DS4_EXACT_TRACE_PATH).

The simulator speaks the fork dialect (banner, counterless summary, no trace line) and the target is
not one of ds4ci's tiny models, so the only token IDs are the trace file's ``tokens`` records: the gate
gives each server the file in its own sandbox scratch folder, seals it after the server stopped, and
judging reads it (``verify`` too).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from gatekit import DS4CI, GateRun, Workspace

from ds4ci.supervisor import sandbox

pytestmark = pytest.mark.skipif(sandbox.refusal() is not None, reason="the trace file lives in the sandbox's scratch folder")
WRITER = "fork-dialect,exact-trace-writer"


def _gate(tmp_path: Path, faults: str) -> GateRun:
    return Workspace.create(tmp_path).gate(faults=faults, widths="2,3")


def test_the_trace_files_tokens_are_the_oracle_and_verify_agrees(tmp_path: Path) -> None:
    run = _gate(tmp_path, WRITER)
    assert run.code == 0, run.stderr[-3000:]
    doc = run.results
    assert doc is not None and doc["verdict"] == "pass"
    assert doc["target_only"]["oracle"] == "exact-differential trace"
    assert all(w["oracle"] == "exact-differential trace" for w in doc["widths"])
    assert all(p["n"] == 64 for p in doc["target_only"]["prompts"])
    for arm in doc["policy"]["arms"].values():  # the same path in every arm: its own /tmp
        assert arm["DFLASH_DS4_EXACT_TRACE_PATH"] == "/tmp/ds4ci-exact-trace.jsonl"
        assert arm["DFLASH_DS4_EXACT_TRACE_Q"] == "1"
    (bundle,) = (tmp_path / "evidence" / "runs").iterdir()
    for key in ("target-only", "q2", "q3"):
        life = json.loads((bundle / "servers" / key / "lifecycle.json").read_text())
        assert life["exact_trace"] == "collected"
        lines = (bundle / "servers" / key / "exact-trace.jsonl").read_text().splitlines()
        kinds = [json.loads(line)["type"] for line in lines]
        assert kinds[:5] == ["model_config", "request_start", "step", "tokens", "request_end"] and len(kinds) == 9
    proc = subprocess.run([DS4CI, "verify", str(bundle)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_a_divergence_is_caught_through_the_trace_file(tmp_path: Path) -> None:
    run = _gate(tmp_path, f"{WRITER},mismatch-last@q3")
    assert run.code == 1
    assert "q=3 prompt 0 requests 1, 2: token IDs differ: first differing position 63" in run.reasons()


def test_a_request_without_its_tokens_record_fails_naming_the_line(tmp_path: Path) -> None:
    run = _gate(tmp_path, f"{WRITER},exact-trace-no-tokens@q2")
    assert run.code == 1
    assert "q=2: servers/q2/exact-trace.jsonl line 8: request_end of request 1 without its tokens record" in run.reasons()


def test_a_count_other_than_the_answers_fails(tmp_path: Path) -> None:
    run = _gate(tmp_path, f"{WRITER},exact-trace-ids-off@q3")
    assert run.code == 1
    assert ("q=3 prompt 0 request 1: the server's answer says completion_tokens=64 but the exact-differential trace's "
            "tokens record of request 0 (line 4) lists 63 token IDs") in run.reasons()


@pytest.mark.parametrize(("fault", "why"), [
    ("exact-trace-symlink", "refused: a symbolic link, not the server's own file"),
    ("exact-trace-fifo", "refused: not a regular file (a FIFO, device or folder)"),
])
def test_a_linked_or_fifo_trace_file_is_refused(tmp_path: Path, fault: str, why: str) -> None:
    run = _gate(tmp_path, f"{WRITER},{fault}@q2")
    assert run.code == 3
    assert f"reference-exact q=2: the exact-differential trace file the server left was {why}" in run.reasons()
    (attempt,) = (tmp_path / "evidence" / "failed").iterdir()
    assert not (attempt / "servers" / "q2" / "exact-trace.jsonl").exists()  # nothing of it was sealed


def test_the_strict_dialects_own_trace_outranks_the_file(tmp_path: Path) -> None:
    run = _gate(tmp_path, "exact-trace-writer")
    assert run.code == 0, run.stderr[-3000:]
    assert run.results is not None and run.results["target_only"]["oracle"] == "server token trace"
