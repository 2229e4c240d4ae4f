"""A width's coverage record in results.json (schema-valid), the policy on its verdict, and where it is shown."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from paths import TESTS

from ds4ci.evidence import results
from ds4ci.judging import coverage, coverpolicy
from ds4ci.judging.coverage import RequestSteps
from ds4ci.judging.specsteps import COMPARE, TIMING, SpecStep
from ds4ci.report import render, table
from ds4ci.report.docview.words import PLAIN_BOUNDARIES


def _doc() -> Any:
    return copy.deepcopy(json.loads((TESTS / "data" / "results" / "pass.json").read_text()))


def _exercised(width: int) -> list[RequestSteps]:
    """q=3 from 120 with every accept length, a rollback across 127 and the wrap at 128."""
    steps = [SpecStep(i + 1, None, width, a, TIMING) for i, a in enumerate([0, 2, 1, 0, 2, 0])]
    return [RequestSteps(steps, 120)]


def test_prompt_tokens_come_from_usage_and_nothing_else() -> None:
    assert coverage.prompt_tokens({"usage": {"prompt_tokens": 97}}) == 97
    for bad in ({"usage": {"prompt_tokens": True}}, {"usage": {"prompt_tokens": -1}}, {"usage": {}}, {"usage": 3},
                [], None, {"usage": {"prompt_tokens": "97"}}):
        assert coverage.prompt_tokens(bad) is None, bad


def test_the_record_is_written_and_schema_valid_without_changing_a_pass() -> None:
    d = _doc()
    width = next(w for w in d["widths"] if w["verdict"] == "pass")
    width["q"] = 3
    coverpolicy.apply(width, _exercised(3), required=True)
    assert width["verdict"] == "pass" and width["coverage"]["unmet"] == []
    assert width["coverage"]["accept_histogram"] == [3, 1, 2]
    results.validate(d)
    text = table.render(d)
    assert "q=3 coverage (timing): accepted 0..2 drafts 3/1/2 steps; rejections at slot 1..2 3/1" in text
    assert "ratio4 2/4 rejected first at 126,130; ratio128 1/2 rejected first at 126; window 1/2" in text
    body, _ = render.render([d], kind="summary")  # the comment collapses a pass; the job summary shows it all
    assert "**Coverage**" in body and "- q=3: 6 verify steps seen, 4 with a rejected draft; 4 crossed a 4-token" in body


def test_required_and_unmet_leaves_a_passing_width_without_a_verdict_naming_the_minimum() -> None:
    d = _doc()
    width = next(w for w in d["widths"] if w["verdict"] == "pass")
    q = width["q"]
    summary_only = [RequestSteps([], 97)]
    coverpolicy.apply(width, summary_only, required=True)
    assert width["verdict"] == "error"  # the proof was not shown; the answers did not differ
    assert any("coverage minimum 'per-step evidence' not met" in r for r in width["reasons"])
    assert width["coverage"]["source"] == "summary" and width["coverage"]["boundaries"] is None
    results.validate(d)
    assert f"q={q} coverage (summary): not measurable" in table.render(d)


def test_not_required_records_the_unmet_minimums_as_information_only() -> None:
    d = _doc()
    width = next(w for w in d["widths"] if w["verdict"] == "pass")
    steps = [SpecStep(0, 10, width["q"], 0, COMPARE)]
    coverpolicy.apply(width, [RequestSteps(steps, None)], required=False)
    assert width["verdict"] == "pass" and width["coverage"]["unmet"]
    assert not any("coverage minimum" in r for r in width["reasons"])
    results.validate(d)


def test_a_width_that_could_not_be_judged_stays_an_error() -> None:
    d = _doc()
    width = d["widths"][0]
    width["verdict"] = "error"
    coverpolicy.apply(width, [RequestSteps([], None)], required=True)
    assert width["verdict"] == "error" and any("per-step evidence" in r for r in width["reasons"])


def test_a_forged_record_fails_the_schema() -> None:
    d = _doc()
    width = d["widths"][0]
    coverpolicy.apply(width, _exercised(width["q"]), required=False)
    results.validate(d)
    width["coverage"]["source"] = "hearsay"
    with pytest.raises(results.ResultsError):
        results.validate(d)


def test_requests_zip_steps_with_prompt_token_counts() -> None:
    steps = [[SpecStep(1, None, 2, 1, TIMING)], [], []]
    reqs = coverage.requests(steps, [97, None, None])
    assert [r.prompt_tokens for r in reqs] == [97, None, None] and reqs[0].steps == (steps[0][0],)
    with pytest.raises(ValueError, match="2 requests' steps but 3 prompt token counts"):
        coverage.requests(steps[:2], [97, None, None])


def test_the_rollback_and_coverage_lines_name_each_boundary_in_the_same_words() -> None:
    d = _doc()
    width = next(w for w in d["widths"] if w["verdict"] == "pass")
    width["q"] = 3
    coverpolicy.apply(width, _exercised(3), required=True)
    body, _ = render.render([d], kind="summary")
    rollback = next(line for line in body.splitlines() if line.startswith("**Rollback**"))
    covered = next(line for line in body.splitlines() if line.startswith("- q=3: 6 verify steps"))
    assert ("q=3: identical answers after 3 rejected drafts, with rejected drafts at a 4-token compression boundary "
            "(first at 126, 130); a 128-token compression boundary (first at 126); a 128-token window wrap (first at 126);"
            in rollback), rollback
    for name in PLAIN_BOUNDARIES.values():
        assert f"crossed a {name} (" in covered, (name, covered)
