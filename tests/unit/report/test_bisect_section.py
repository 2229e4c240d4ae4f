"""The bisect's comment section: its one-line answer, escaping, its place in the comment beside a runner's gate
section (neither replaces the other, and it adds no row to the status table), and a result file read as untrusted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bisectkit import search

from ds4ci.bisect.outcome import document
from ds4ci.bisect.search import expected_steps
from ds4ci.errors import UsageError
from ds4ci.records import BisectResult
from ds4ci.report import bisect, render
from ds4ci.report.sections import MARKER, Section, merge_sections, parse_sections


def found() -> BisectResult:
    doc = document(search("p" * 9 + "f" * 7)[0], "box", expected_steps(16))
    doc["first_failing"] = {"sha": doc["first_failing"]["sha"], "subject": "ds4: fuse verify path"}  # type: ignore[index]
    return doc


def test_the_section_says_the_answer_in_one_line() -> None:
    doc = found()
    section = bisect.section(render.environment(), doc)
    short = doc["first_failing"]["sha"][:7]  # type: ignore[index]
    last = doc["last_passing"]["sha"][:7]  # type: ignore[index]
    assert (f"First failing commit: `{short}` ds4: fuse verify path; parity at q=3 breaks at position 42; "
            f"last passing: `{last}`") in section.body
    assert section.role == "bisect" and section.state == "fail" and section.head == doc["bad"]["sha"]
    assert "| # | commit |" not in section.body  # the step table is the job summary's
    summary = bisect.section(render.environment(), doc, kind="summary")
    assert summary.body.count("| `") == len(doc["steps"])


def test_text_from_a_commit_is_escaped() -> None:
    doc = found()
    doc["first_failing"]["subject"] = "@team <img src=x> `x` [a](http://e)"  # type: ignore[index]
    body = bisect.section(render.environment(), doc).body
    assert "<img" not in body and "](http" not in body and "@team" not in body


def test_a_runners_gate_and_bisect_sections_sit_side_by_side_and_survive_the_next_publish() -> None:
    gate = Section("box", "gate", "fail", "a" * 40, None, "gate body")
    ours = bisect.section(render.environment(), found())
    merged = merge_sections([ours], [gate])
    assert {(s.runner, s.role) for s in merged} == {("box", "gate"), ("box", "bisect")}
    body = MARKER + "\n" + "\n".join(s.text() for s in merged)
    assert {(s.runner, s.role) for s in parse_sections(body)} == {("box", "gate"), ("box", "bisect")}
    again = merge_sections([gate], parse_sections(body))  # a later gate publish keeps the bisect section
    assert [s.role for s in again if s.runner == "box"].count("bisect") == 1
    composed = render.compose(render.environment(), again, [])
    assert "## Bisect" in composed and composed.count("| `box`") == 1  # one row: the gate's


def test_a_result_file_is_read_strictly(tmp_path: Path) -> None:
    good = tmp_path / "bisect.json"
    good.write_text(json.dumps(found()))
    assert bisect.load(good)["verdict"] == "found"
    for broken in ('{"schema": "ds4ci/bisect/v1"}', '{"a": 1, "a": 2}', "[]",
                   json.dumps({**found(), "verdict": "maybe"}), json.dumps({**found(), "runner": "a b"})):
        bad = tmp_path / "bad.json"
        bad.write_text(broken)
        with pytest.raises(UsageError, match="--bisect"):
            bisect.load(bad)
    with pytest.raises(UsageError, match="cannot read"):
        bisect.load(tmp_path / "missing.json")


def test_a_bisect_of_an_earlier_head_leaves_the_comment_when_results_of_a_new_head_come() -> None:
    from paths import TESTS

    from ds4ci.evidence import results
    from ds4ci.report.docview import view_of

    doc = results.load(TESTS / "data" / "results" / "pass.json")
    head = view_of(doc).head
    assert head is not None
    old, current = found(), found()
    old["runner"], current["runner"] = "old-box", "box"
    current["bad"] = {"sha": head, "subject": "the head"}
    env = render.environment()
    existing = [bisect.section(env, old), bisect.section(env, current)]
    _, sections = render.render([doc], existing=existing)
    kept = [s.runner for s in sections if s.role == "bisect"]
    assert kept == ["box"]  # old-box searched up to a head the pull request no longer has
