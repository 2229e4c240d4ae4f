"""What one gate run means for the bisect: a failed build is skipped, not blamed; no verdict is skipped; a
refused input stops the search; only a fail with the build passing is a fail."""

from __future__ import annotations

from typing import Any

import pytest

from ds4ci.bisect.step import differences, judge


def results(build_status: str | None = "pass", reasons: tuple[str, ...] = ("q=2 token IDs differ",)) -> Any:
    cell = {"prompt_index": 1, "verdict": "fail", "reasons": list(reasons),
            "mismatch": {"position": 7, "window_start": 0, "target_ids": [], "spec_ids": [], "target_len": 9, "spec_len": 9}}
    return {"reasons": list(reasons), "widths": [{"q": 2, "prompts": [cell]}, {"q": 3, "prompts": [
        {**cell, "verdict": "pass", "mismatch": None}]}],
            "build": None if build_status is None else {"status": build_status, "summary": "the build failed: exit 2"}}


@pytest.mark.parametrize(("code", "doc", "outcome", "says"), [
    (0, results(), "pass", "passed"),
    (1, results(), "fail", "q=2 token IDs differ"),
    (1, results(None), "fail", "q=2 token IDs differ"),
    (1, results("fail"), "skip", "does not build: the build failed: exit 2"),
    (3, results(reasons=("a pinned file is missing",)), "skip", "no verdict: a pinned file is missing"),
    (3, None, "skip", "no verdict: the last line"),
    (2, None, "stop", "refused its input (exit 2): the last line"),
    (-9, None, "stop", "status -9"),
])
def test_judge(code: int, doc: Any, outcome: str, says: str) -> None:
    found, reason = judge(code, doc, "the last line")
    assert found == outcome and says in reason


def test_differences_name_each_failing_cell_with_its_first_differing_position() -> None:
    assert differences(results()) == [{"q": 2, "prompt_index": 1, "position": 7, "reason": "q=2 token IDs differ"}]
