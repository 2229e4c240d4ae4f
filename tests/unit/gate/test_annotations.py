"""ds4ci.gate.annotations: a finished run's reasons, warnings and verdict as annotations."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from ds4ci.gate.annotations import MAX_ANNOTATIONS, announce
from ds4ci.log import Logger


def doc(evidence: Path, verdict: str, reasons: list[str], warnings: list[str] | None = None) -> dict[str, Any]:
    return {
        "runner": {"name": "sm90"},
        "verdict": verdict,
        "exit_code": {"pass": 0, "fail": 1}.get(verdict, 3),
        "reasons": reasons,
        "warnings": warnings or [],
        "evidence": {"dir": str(evidence)},
        "target_only": {"reasons": [], "server_log": "servers/target-only/stderr.log"},
        "widths": [{"q": 3, "reasons": [r for r in reasons if r.startswith("q=3")], "server_log": "servers/q3/stderr.log"}],
    }


def lines(result: dict[str, Any], monkeypatch: pytest.MonkeyPatch, cwd: Path) -> list[str]:
    monkeypatch.chdir(cwd)
    out = io.StringIO()
    announce(Logger("actions", out), result)
    return out.getvalue().splitlines()


def test_a_reason_judged_from_a_server_log_names_that_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evidence = tmp_path / "evidence" / "failed" / "a1"
    (evidence / "servers" / "q3").mkdir(parents=True)
    (evidence / "servers" / "q3" / "stderr.log").write_text("[ds4-spec] ...\n")
    result = doc(evidence, "fail", ["q=3 prompt 0: token IDs differ", "check 'lint': fail: exit code 1"], ["slow teardown"])
    assert lines(result, monkeypatch, tmp_path) == [
        "::error file=evidence/failed/a1/servers/q3/stderr.log,title=ds4ci gate (sm90)::q=3 prompt 0: token IDs differ",
        "::error title=ds4ci gate (sm90)::check 'lint': fail: exit code 1",
        "::warning title=ds4ci gate (sm90)::slow teardown",
        f"::error title=ds4ci gate (sm90)::verdict FAIL (exit code 1); evidence: {evidence}; 2 reason(s)",
    ]


def test_outside_the_working_directory_the_log_path_is_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evidence = tmp_path / "evidence"
    (evidence / "servers" / "q3").mkdir(parents=True)
    (evidence / "servers" / "q3" / "stderr.log").write_text("")
    elsewhere = tmp_path / "checkout"
    elsewhere.mkdir()
    first = lines(doc(evidence, "fail", ["q=3: boom"]), monkeypatch, elsewhere)[0]
    assert first.startswith(f"::error file={evidence / 'servers' / 'q3' / 'stderr.log'},")


def test_a_missing_log_is_not_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert lines(doc(tmp_path, "error", ["q=3: server did not start"]), monkeypatch, tmp_path)[0] == (
        "::error title=ds4ci gate (sm90)::q=3: server did not start"
    )


def test_a_pass_is_a_notice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert lines(doc(tmp_path, "pass", []), monkeypatch, tmp_path) == [
        f"::notice title=ds4ci gate (sm90)::verdict PASS (exit code 0); evidence: {tmp_path}"
    ]


def test_annotations_are_capped_and_the_rest_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reasons = [f"reason {i}" for i in range(MAX_ANNOTATIONS + 3)]
    warnings = [f"warning {i}" for i in range(MAX_ANNOTATIONS + 1)]
    out = lines(doc(tmp_path, "fail", reasons, warnings), monkeypatch, tmp_path)
    assert sum(line.startswith("::error") for line in out) == MAX_ANNOTATIONS + 1  # plus the verdict line
    assert sum(line.startswith("::warning") for line in out) == MAX_ANNOTATIONS
    assert f"4 more reason(s)/warning(s) in {tmp_path / 'results.json'}" in out
