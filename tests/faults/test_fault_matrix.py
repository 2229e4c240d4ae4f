"""Every fault case ends in its expected non-pass verdict, with no process left and nothing lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from cases import CASES, Case, run_default
from gatekit import Workspace


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fault_case(tmp_path: Path, case: Case) -> None:
    ws = Workspace.create(tmp_path)
    outcome = (case.run or run_default)(ws, case)
    assert outcome.code == case.expect_code, outcome.reasons
    assert outcome.verdict == case.expect_verdict, outcome.reasons
    assert case.expect_text in outcome.reasons
    assert outcome.leftovers == [], "processes outlived the gate"
    listing = outcome.evidence
    if case.expect_attempt_left:
        assert len(listing["attempts"]) == 1, listing
    else:
        assert listing["attempts"] == [], listing
    if case.expect_verdict in ("fail", "error"):
        # The failed attempt keeps its diagnostics and never occupies a passing run's place.
        assert len(listing["failed"]) == 1 and listing["runs"] == [], listing
