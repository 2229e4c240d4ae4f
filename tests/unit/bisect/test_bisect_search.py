"""The bisect's search order, skips and answers, with a fake step runner (tests/bisectkit.py: no git, no gate)."""

from __future__ import annotations

import pytest
from bisectkit import search

from ds4ci.bisect.outcome import EXIT_CODES, document, text
from ds4ci.bisect.search import expected_steps


def test_sixteen_commits_take_four_gate_runs_and_name_the_planted_one() -> None:
    found, ran = search("p" * 9 + "f" * 7)
    assert (found.verdict, found.first_bad, found.last_good) == ("found", 9, 8)
    assert ran == [7, 11, 9, 8] and expected_steps(16) == 4


@pytest.mark.parametrize("culprit", range(1, 16))
def test_every_culprit_of_sixteen_is_found_within_five_runs_and_ends_are_run_only_when_the_answer_rests_on_them(
    culprit: int,
) -> None:
    found, ran = search("p" * culprit + "f" * (16 - culprit))
    assert (found.verdict, found.first_bad, found.last_good) == ("found", culprit, culprit - 1)
    assert len(ran) <= 5 and len(set(ran)) == len(ran)
    assert (15 in ran) == (culprit == 15) and (0 in ran) == (culprit == 1)


def test_a_commit_that_does_not_build_is_skipped_and_its_neighbour_nearest_the_middle_is_run() -> None:
    history = "p" * 9 + "f" * 7
    history = history[:11] + "s" + history[12:]
    found, ran = search(history)
    assert ran == [7, 11, 10, 8, 9]
    assert (found.verdict, found.first_bad, found.last_good) == ("found", 9, 8)
    doc = document(found, "box", expected_steps(16))
    assert [s["position"] for s in doc["skipped"]] == [11] and doc["exit_code"] == 0
    assert doc["differences"] == [{"q": 3, "prompt_index": 0, "position": 42, "reason": "token IDs differ"}]
    assert "skipped: " + f"{11:040x}"[:12] in text(doc)


def test_only_skipped_commits_between_is_no_verdict_naming_every_candidate() -> None:
    found, _ = search("ppppsssf")
    doc = document(found, "box", expected_steps(8))
    assert found.verdict == "no_verdict" and doc["exit_code"] == 3
    assert [c["sha"] for c in doc["candidates"]] == [f"{i:040x}" for i in (4, 5, 6, 7)]
    assert doc["first_failing"] is None and doc["last_passing"] is None
    assert "only skipped commits" in doc["reason"]


@pytest.mark.parametrize(("history", "why"), [("pppppppp", "the bad end passes"), ("ffffffff", "the good end fails")])
def test_a_range_without_a_culprit_is_not_found(history: str, why: str) -> None:
    found, _ = search(history)
    doc = document(found, "box", expected_steps(len(history)))
    assert found.verdict == "not_found" and doc["exit_code"] == 1 and why in doc["reason"]
    assert doc["first_failing"] is None


def test_a_bad_end_that_cannot_be_judged_is_no_verdict() -> None:
    found, ran = search("pppppppps")
    assert found.verdict == "no_verdict" and "the bad end could not be judged" in found.reason and ran[-1] == 8


def test_a_step_the_gate_refuses_stops_the_search() -> None:
    found, ran = search("pppxffff")
    assert found.verdict == "no_verdict" and ran == [3] and "stopped at" in found.reason


def test_two_adjacent_ends_are_both_run() -> None:
    found, ran = search("pf")
    assert ran == [1, 0] and (found.verdict, found.first_bad, found.last_good) == ("found", 1, 0)


def test_only_found_is_zero() -> None:
    assert EXIT_CODES == {"found": 0, "not_found": 1, "no_verdict": 3}
