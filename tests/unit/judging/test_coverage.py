"""Proof coverage from per-step records: histograms, rejections per slot, boundary-touching batches."""

from __future__ import annotations

import pytest

from ds4ci.judging import coverage as cov
from ds4ci.judging import specsteps
from ds4ci.judging.specsteps import COMPARE, TIMING, TOKEN_TRACE, SpecStep


def _steps(accepted: list[int | None], width: int, source: str = TIMING, start: int | None = None,
           positions: list[int | None] | None = None) -> list[SpecStep]:
    """Consecutive steps from the loop's first (timing lines print 1-based step numbers, the others 0-based)."""
    pos = positions or [None] * len(accepted)
    first = specsteps.first_step_number(source) if start is None else start
    return [SpecStep(first + i, pos[i], width, a, source) for i, a in enumerate(accepted)]


def test_touched_names_the_first_boundary_position_in_the_batch() -> None:
    assert cov.touched(cov.RATIO4, 29, 2) is None  # 29, 30
    assert cov.touched(cov.RATIO4, 29, 3) == 31
    assert cov.touched(cov.RATIO4, 31, 1) == 31  # the seed itself completes the row
    assert cov.touched(cov.RATIO128, 125, 3) == 127 and cov.touched(cov.RATIO128, 128, 4) is None
    assert cov.touched(cov.RATIO128, 254, 2) == 255
    assert cov.touched(cov.WINDOW, 0, 4) is None  # position 0 is not a wrap
    assert cov.touched(cov.WINDOW, 126, 3) == 128 and cov.touched(cov.WINDOW, 255, 2) == 256
    assert cov.touched(cov.WINDOW, 129, 4) is None


def test_positions_follow_accepted_drafts_from_the_prompt_length() -> None:
    steps = _steps([0, 2, 1, 0], 3)
    assert steps[0].step == 1  # a timing line counts after the step
    assert cov.positions(steps, 97) == ([97, 98, 101, 103], [])
    trace = _steps([0, 2, 1, 0], 3, TOKEN_TRACE)
    assert trace[0].step == 0 and cov.positions(trace, 97) == ([97, 98, 101, 103], [])
    printed = _steps([0, 2], 3, COMPARE, positions=[40, 41])
    assert cov.positions(printed, None) == ([40, 41], [])  # printed positions need no prompt length
    # a gap in timing lines: the steps after it are unknown until a printed position
    gap = [*_steps([1, 0], 2), SpecStep(9, None, 2, 1, TIMING), SpecStep(10, None, 2, 0, TIMING)]
    starts, why = cov.positions(gap, 5)
    assert starts == [5, 7, None, None] and why == ["no line for step 7, so step 8's position is unknown"]


@pytest.mark.parametrize(("steps", "prompt", "known", "why"), [
    (_steps([0, 1], 2), None, [None, None], "prompt's token count is unknown"),
    (_steps([None, 1], 2), 10, [10, None], "step 0 does not say how many drafts it accepted, so step 1's"),
    ([SpecStep(1, None, 2, 1, TIMING), SpecStep(3, None, 2, 0, TIMING)], 10, [10, None],
     "no line for step 1, so step 2's position is unknown"),
    (_steps([1], 2, COMPARE, positions=[-3]), 10, [None], "printed position -3"),
    (_steps([1, 1], 2, start=4), 10, [None, None], "no line for step 2, so step 3's position is unknown"),
])
def test_positions_say_why_they_are_unknown(
        steps: list[SpecStep], prompt: int | None, known: list[int | None], why: str) -> None:
    starts, reasons = cov.positions(steps, prompt)
    assert starts == known and len(reasons) == 1 and why in reasons[0]


def test_histogram_slots_and_counters_per_width() -> None:
    # q=4: accepted 0, 3, 1, 2, 3, 0 -> rejections at slot 1 (twice), slot 2, slot 3
    c = cov.width_coverage(4, [cov.RequestSteps(_steps([0, 3, 1, 2, 3, 0], 4), 10)])
    assert c.accept_histogram == (2, 1, 1, 2)
    assert c.rejections_per_slot == (2, 1, 1)
    assert (c.matched, c.offered, c.steps) == (9, 18, 6)
    assert c.source == TIMING and c.notes == ()


def test_requests_add_up_and_a_narrower_last_step_counts_its_own_offer() -> None:
    a = cov.RequestSteps(_steps([1, 1, 0], 2), 5)
    b = cov.RequestSteps([*_steps([2, 0], 3), SpecStep(3, None, 2, 1, TIMING)], 7)
    c2 = cov.width_coverage(2, [a])
    c3 = cov.width_coverage(3, [b, b])
    assert c2.accept_histogram == (1, 2) and c2.rejections_per_slot == (1,)
    assert c3.accept_histogram == (2, 2, 2) and c3.rejections_per_slot == (2, 0)
    assert (c3.matched, c3.offered, c3.requests) == (6, 10, 2)


def test_boundary_batches_rejections_and_rollbacks() -> None:
    steps = _steps([2, 0, 1, 2, 0, 1], 3)
    c = cov.width_coverage(3, [cov.RequestSteps(steps, 120)])
    # starts: 120, 123, 124, 126, 129, 130
    b4 = c.boundaries[cov.RATIO4] if c.boundaries else None
    assert b4 is not None
    # touching p%4==3: 120-122 no; 123-125 yes (rejected at slot 1; 123 is the seed, kept: no rollback);
    # 124-126 no; 126-128: 127 (all accepted); 129-131: 131 (rejected at slot 1: 130 on discarded, 131 too);
    # 130-132: 131 (131 accepted, 132 rejected: the boundary row is kept)
    assert (b4.batches, b4.rejected, b4.rejected_at_boundary) == (4, 3, 1)
    assert b4.first_positions == (123, 126, 129) and b4.first_rejected_positions == (123, 129, 130)
    b128 = c.boundaries[cov.RATIO128] if c.boundaries else None
    assert b128 is not None and (b128.batches, b128.rejected, b128.first_positions) == (1, 0, (126,))
    win = c.boundaries[cov.WINDOW] if c.boundaries else None
    assert win is not None and (win.batches, win.rejected) == (1, 0)


def test_a_rejection_that_discards_the_boundary_row_is_a_rollback_across_it() -> None:
    # width 4 at 125: 125,126,127,128; accepted 1 -> 126 accepted, 127 rejected: both boundaries rolled back
    c = cov.width_coverage(4, [cov.RequestSteps(_steps([1], 4, COMPARE, positions=[125]), None)])
    assert c.boundaries is not None
    for kind in (cov.RATIO4, cov.RATIO128, cov.WINDOW):
        b = c.boundaries[kind]
        assert (b.batches, b.rejected, b.rejected_at_boundary, b.first_rejected_positions) == (1, 1, 1, (125,)), kind
    # accepted 2: 127 kept, 128 rejected: ratio boundaries kept, the window's wrap rolled back
    c = cov.width_coverage(4, [cov.RequestSteps(_steps([2], 4, COMPARE, positions=[125]), None)])
    assert c.boundaries is not None
    assert [c.boundaries[k].rejected_at_boundary for k in cov.BOUNDARIES] == [0, 0, 1]


def test_families_combine_by_loop_step_the_stronger_winning() -> None:
    trace = _steps([1, 0], 2, TOKEN_TRACE)  # loop steps 0, 1
    timing = _steps([0, 0, 1, 1], 2, TIMING)  # loop steps 0..3 (printed 1..4); 0 and 1 disagree, trace wins
    source, steps = cov.merged([*timing, *trace])
    assert source == TIMING and [s.source for s in steps] == [TOKEN_TRACE, TOKEN_TRACE, TIMING, TIMING]
    c = cov.width_coverage(2, [cov.RequestSteps([*timing, *trace], 3)])
    assert c.accept_histogram == (1, 3) and c.steps == 4 and c.notes == ()
    # the real build's compare lines stop after 8 steps; timing lines fill what they print
    compare = [SpecStep(i, 3 + 2 * i, 2, 1, COMPARE) for i in range(2)]
    source, steps = cov.merged([*compare, SpecStep(3, None, 2, 0, TIMING), SpecStep(9, None, 2, 0, TIMING)])
    assert [specsteps.loop_index(s) for s in steps] == [0, 1, 2, 8] and source == TIMING
    assert cov.positions(steps, None)[0] == [3, 5, 7, None]
    assert cov.merged([SpecStep(0, 1, 2, 1, "other")]) == (cov.SUMMARY, [])


def test_the_weakest_request_names_the_width_source() -> None:
    a = cov.RequestSteps(_steps([1], 2, COMPARE, positions=[3]), 3)
    b = cov.RequestSteps(_steps([0], 2, TIMING), 3)
    assert cov.width_coverage(2, [a, b]).source == TIMING
    assert cov.width_coverage(2, [a]).source == COMPARE


def test_summary_only_says_unknown_and_why() -> None:
    only = cov.width_coverage(2, [cov.RequestSteps([], 97)])
    assert only.source == cov.SUMMARY and only.accept_histogram is None and only.rejections_per_slot is None
    assert only.boundaries is None and only.matched is None and only.steps is None
    assert only.notes == ("request 1: no per-step lines, only the summary",)
    assert only.to_json()["source"] == cov.SUMMARY
    assert "not measurable (request 1: no per-step lines, only the summary)" in cov.compact_line(only.to_json())


def test_counts_cover_the_steps_shown_and_say_what_is_missing() -> None:
    mixed = cov.width_coverage(3, [cov.RequestSteps([], 97), cov.RequestSteps(_steps([1], 3), 97)])
    assert mixed.source == cov.SUMMARY and mixed.sources == (cov.SUMMARY, TIMING)
    assert mixed.accept_histogram == (0, 1, 0) and mixed.steps == 1
    assert mixed.notes == ("request 1: no per-step lines, only the summary",)
    # the real build's timing lines: the first steps, then one now and then
    sparse = [*_steps([0, 1, 0, 1], 2), SpecStep(33, None, 2, 0, TIMING)]
    c = cov.width_coverage(2, [cov.RequestSteps(sparse, 125)])
    assert c.accept_histogram == (3, 2) and c.steps == 5
    assert c.notes[0] == "request 1: per-step lines for 5 step(s) only (steps 0..32, 0-based, with gaps)"
    assert c.boundaries is not None and c.boundaries[cov.RATIO128].batches == 1  # 125, 126, 128, 129: 126-127


def test_an_impossible_accept_count_makes_the_counts_unknown() -> None:
    c = cov.width_coverage(2, [cov.RequestSteps(_steps([0, 3], 2), 5)])
    assert c.accept_histogram is None and c.boundaries is None
    assert c.notes == ("request 1: step 1 accepted 3 of 1 drafts at width 2",)
    wide = cov.width_coverage(2, [cov.RequestSteps(_steps([2], 3), 5)])
    assert wide.accept_histogram is None  # a step wider than the arm's width
    silent = cov.width_coverage(2, [cov.RequestSteps(_steps([None, 1], 2), 5)])
    assert silent.accept_histogram == (0, 1)
    assert "step 0 does not say how many drafts it accepted" in silent.notes[-1]


def test_unknown_positions_keep_the_histogram() -> None:
    c = cov.width_coverage(2, [cov.RequestSteps(_steps([1, 0], 2), None)])
    assert c.accept_histogram == (1, 1) and c.boundaries is None
    assert "prompt's token count is unknown" in c.notes[0]
    assert cov.compact_line(c.to_json()).endswith("boundaries unknown")


def test_first_positions_are_capped_and_json_is_plain() -> None:
    c = cov.width_coverage(2, [cov.RequestSteps(_steps([0] * 40, 2), 0)])
    assert c.boundaries is not None
    b4 = c.boundaries[cov.RATIO4]
    assert b4.batches == 20 and b4.rejected == 20 and b4.rejected_at_boundary == 10  # every odd start; 3,7,.. as seed
    assert b4.first_positions == (2, 3, 6)
    data = c.to_json()
    assert data["boundaries"]["ratio4"]["first_positions"] == [2, 3, 6]
    assert data["accept_histogram"] == [40, 0] and data["rejections_per_slot"] == [40] and data["unmet"] == []
    assert c.to_json(["why"])["unmet"] == ["why"]


def test_compact_line_names_counts_and_first_rejected_positions() -> None:
    steps = _steps([1, 0, 1, 1], 2, COMPARE, positions=[29, 31, 32, 34])
    line = cov.compact_line(cov.width_coverage(2, [cov.RequestSteps(steps, None)]).to_json())
    assert line.startswith("q=2 coverage (compare): accepted 0..1 drafts 1/3 steps; rejections at slot 1..1 1")
    assert "ratio4 1/2 rejected first at 31" in line
    assert "ratio128 0/0 rejected" in line and "window 0/0 rejected" in line


def test_repeats_do_not_repeat_first_positions() -> None:
    one = cov.RequestSteps(_steps([0], 2, COMPARE, positions=[30]), None)
    c = cov.width_coverage(2, [one, one])
    assert c.boundaries is not None
    b4 = c.boundaries[cov.RATIO4]
    assert (b4.batches, b4.rejected, b4.first_positions, b4.first_rejected_positions) == (2, 2, (30,), (30,))
