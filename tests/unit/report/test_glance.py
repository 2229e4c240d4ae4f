"""The comment for a glance: failures first, one cut-at-a-word line per runner, passing detail collapsed,
each cause once, readable diffs, coverage in plain words, and three passing runners in at most 40 lines."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from paths import TESTS

from ds4ci.evidence.results import load
from ds4ci.report import glance, markdown, render
from ds4ci.report.docview import difference, words
from ds4ci.report.sections import parse_sections

DATA = TESTS / "data" / "results"
RUN_URL = "https://github.com/acme/engine/actions/runs/7"


def doc(name: str, runner: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = load(DATA / f"{name}.json")
    if runner is not None:
        found = copy.deepcopy(found)
        found["runner"]["name"] = runner
    return found


def comment(*docs: dict[str, Any]) -> str:
    body, _ = render.render(list(docs), kind="comment", run_url=RUN_URL)
    return body


def test_three_passing_runners_fit_forty_lines_with_their_detail_collapsed() -> None:
    body = comment(doc("pass"), doc("pass-second-runner"), doc("pass", "sm86"))
    lines = body.rstrip("\n").split("\n")
    assert len(lines) <= 40, "\n".join(lines)
    assert body.count("<details><summary>✅ pass:") == 3 and body.count("</details>") == 3
    assert "| width |" not in body  # the per-width tables are in the job summary
    assert "is claimed by the server's log; what the gate tested is parity after 30 rejected drafts" in body
    summary, _ = render.render([doc("pass"), doc("pass-second-runner"), doc("pass", "sm86")], kind="summary",
                               run_url=RUN_URL)
    assert summary.count("| width |") == 3 and len(summary) > 2 * len(body)  # the fuller report


def test_failures_come_first_in_the_table_and_the_sections() -> None:
    body = comment(doc("pass", "aaa"), doc("fail", "zzz"))
    rows = [line for line in body.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == ["zzz", "aaa"]
    assert [s.runner for s in parse_sections(body)] == ["zzz", "aaa"]


def test_a_cause_at_every_width_is_said_once_with_one_diff_block() -> None:
    failing = doc("fail")
    first = failing["widths"][0]
    mismatch = next(p["mismatch"] for p in first["prompts"] if p["mismatch"])
    reason = failing["reasons"][0].split(" ", 1)[1]
    for width in failing["widths"]:
        width["verdict"] = "fail"
        for prompt in width["prompts"]:
            prompt["mismatch"] = copy.deepcopy(mismatch)
    failing["reasons"] = [f"q={w['q']} {reason}" for w in failing["widths"]]
    body = comment(failing)
    assert body.count(reason) == 1  # the section's one bullet; the table's row and the headline say where it differs
    assert body.count("fails parity at q=2,3,4, position 0") == 3  # the headline, the table's row, the hidden why
    assert f"- q=2,3,4 {reason}" in body and f"q=3 {reason}" not in body
    assert body.count("```text") == 1 and "(q=2,3,4, prompt 0)" in body
    assert "the same at each of these widths" in body
    assert words.headline(failing) == f"q=2,3,4 {reason}"  # no "(+2 more)" for one cause


def test_the_marked_token_never_runs_into_its_neighbour() -> None:
    block = difference.id_block({"window_start": 17, "position": 19, "target_len": 40, "spec_len": 40,
                                   "target_ids": [28023, 20449, 28023, 5], "spec_ids": [28023, 20449, 1, 5]})
    lines = block.splitlines()
    assert "20449 [28023]" in lines[2] and lines[3].split()[-2:] == ["[1]", "5"]
    caret = lines[4]
    assert caret.index("^") == lines[2].index("[28023]")


def test_the_why_is_cut_at_a_word() -> None:
    failing = doc("fail")
    failing["reasons"] = ["q=2 prompt 0 requests 1, 2: token IDs differ: first differing position 19 (target-only "
                          "has 96 IDs, reference-exact 96); IDs from position 19: target-only [1, 2, 3] vs "
                          "reference-exact [4, 5, 6] and a good deal more text to cut somewhere sensible", "other"]
    why = words.headline(failing)
    assert why.endswith("… (+1 more)") and len(why) <= words.REASON_CHARS
    kept = why.removesuffix("… (+1 more)")
    assert failing["reasons"][0].startswith(kept) and not failing["reasons"][0][len(kept)].isalnum()


@pytest.mark.parametrize(("text", "limit", "expected"), [
    ("short", 10, "short"),
    ("one two three four", 12, "one two…"),
    ("averyveryverylongword", 8, "averyve…"),
])
def test_cut_at_word(text: str, limit: int, expected: str) -> None:
    assert markdown.cut_at_word(text, limit) == expected


def test_coverage_is_in_plain_words_with_the_docs_linked(monkeypatch: pytest.MonkeyPatch) -> None:
    record = {"width": 4, "accept_histogram": [0, 2, 2, 12], "boundaries": {
        "ratio4": {"batches": 16, "rejected": 4, "rolled_back": 1, "first_positions": [], "first_rejected_positions": []},
        "ratio128": {"batches": 0, "rejected": 0, "rolled_back": 0, "first_positions": [], "first_rejected_positions": []},
        "window": {"batches": 0, "rejected": 0, "rolled_back": 0, "first_positions": [], "first_rejected_positions": []},
    }}
    said = words.coverage_words(record)
    assert said == ("q=4: 16 verify steps seen, 4 with a rejected draft; 16 crossed a 4-token compression boundary "
                    "(4 with a rejection); none crossed a 128-token compression boundary or a 128-token window wrap")
    monkeypatch.setenv("DS4CI_REF", "acme/ds4ci@v0.1.0")
    assert glance.docs_link(*glance.COVERAGE_DOC) == (
        "https://github.com/acme/ds4ci/blob/v0.1.0/docs/results.md#proof-coverage-of-one-width-coverage")
    monkeypatch.setenv("DS4CI_REF", "")
    assert glance.docs_link(*glance.COVERAGE_DOC) is None


def test_revision_lines_break_as_on_github() -> None:
    body = comment(doc("pass"))
    head_line = next(line for line in body.splitlines() if line.startswith("**Revisions**"))
    assert head_line.endswith("<br>")


def test_the_rendered_comment_for_one_failing_and_two_passing_runners(tmp_path: Path) -> None:
    body = comment(doc("pass", "gfx1151-b"), doc("fail"), doc("pass", "sm86"))
    (tmp_path / "comment.md").write_text(body)
    sections = parse_sections(body)
    assert [s.state for s in sections] == ["fail", "pass", "pass"]
    assert body.count("<details><summary>✅ pass:") == 2
    assert "### ❌ fail: `gfx1151`" in body and "| width |" in body  # the failure in full
