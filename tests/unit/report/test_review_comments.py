"""The comment a reviewer reads in ten seconds, as golden files: pass, a new failure, one the base already had, a
runner problem, a crashed server, a failed build, three runners. ``python tests/regenerate_golden.py`` writes them
again after a deliberate change (then read the diff)."""

from __future__ import annotations

import os

import pytest
from paths import TESTS
from reviewcases import BASE, CASES, REPO, comment

GOLDEN = TESTS / "golden"
UPDATE = os.environ.get("DS4CI_UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_review_comment_matches_its_golden_file(case: str) -> None:
    body = comment(case)
    path = GOLDEN / f"{case}.md"
    if UPDATE:
        path.write_text(body, encoding="utf-8")
    assert path.exists(), f"missing {path}: run python tests/regenerate_golden.py"
    assert body == path.read_text(encoding="utf-8"), f"{case} differs from {path}"


def _headline(case: str) -> str:
    return comment(case).splitlines()[2]


def test_the_first_line_says_what_to_do() -> None:
    assert _headline("review-pass") == "**2 of 2 runners pass on 1a95462: may merge**"
    assert _headline("review-fail-new") == "**blocked: gfx1151 fails parity at q=2, position 42 (new since the base)**"
    assert _headline("review-fail-pre-existing") == (
        "**blocked: gfx1151 fails parity at q=2, position 42 (already failing on the base)**")
    assert _headline("review-error-runner").startswith(
        "**gfx1151 could not reach a verdict (runner problem: server did not answer /health within 600 s")
    assert _headline("review-error-crash") == ("**blocked: gfx1151: the server crashed: q=3 server exited with signal 11 "
                                               "(SIGSEGV) before it was ready (new since the base)**")
    assert _headline("review-build-failure") == (
        "**blocked: gfx1151 does not build (exit 1 (2/3 targets built)) (new since the base)**")
    assert _headline("review-three-runners").startswith(
        "**blocked: gfx1151 fails parity at q=2, position 42 (already failing on the base)")


def test_the_first_difference_is_shown_in_words_with_its_ids() -> None:
    body = comment("review-fail-new")
    assert "- target-only: ` w417 w88 w1203 w5⟦ w77⟧ w9 w310 w42`" in body
    assert "- reference-exact: ` w417 w88 w1203 w5⟦ w78⟧ w9 w310 w42`" in body
    assert "[77]" in body and "[78]" in body  # the IDs stay


def test_the_base_is_compared_and_drawn() -> None:
    body = comment("review-fail-new")
    assert (f"**Against the base** (`{BASE[:7]}`): new since the base ({BASE[:7]} passed); gate time 20 min "
            "(the base: 19 min).") in body
    assert "| q=2 | 46/49 (94%) | 47/49 (96%) |" in body
    assert "```mermaid\n%%{init" in body and "\nxychart-beta\n" in body and "    line [95.9, 90, 83.3]" in body
    assert f"already failing on the base ({BASE[:7]}), at the same position" in comment("review-fail-pre-existing")


def test_a_failure_links_the_log_line_the_artifact_and_a_reproduce_command() -> None:
    body = comment("review-build-failure")
    assert f"[src/spec/verify.cpp:88](https://github.com/{REPO}/blob/" in body and "#L88)" in body
    assert "(https://github.com/acme/engine/actions/runs/7#artifacts)" in body
    assert "ds4ci gate --config ds4ci.toml --runner gfx1151 --widths 2,3,4\n```" in body
    assert "/home/runner" not in body.split("<details>")[0]  # no machine path where the reviewer reads


def test_the_visible_part_speaks_a_reviewers_words() -> None:
    """Jargon of the gate's own stays folded: what is visible before the first <details> never uses it."""
    for case in CASES:
        visible = "\n".join(part.split("</details>")[-1] for part in comment(case).split("<details>"))
        for word in ("oracle", "compressor", "countered-summary", "summary-plain", "ratio-4", "ratio4"):
            assert word not in visible, (case, word)
