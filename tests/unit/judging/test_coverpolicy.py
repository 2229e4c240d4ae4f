"""The coverage policy: each named minimum fails with a reason naming it, and only when unmet."""

from __future__ import annotations

from ds4ci.judging import coverage as cov
from ds4ci.judging import coverpolicy as pol
from ds4ci.judging import specsteps
from ds4ci.judging.specsteps import COMPARE, TIMING, SpecStep


def _cov(width: int, accepted: list[int], start: int, source: str = TIMING) -> cov.WidthCoverage:
    steps = [SpecStep(i + specsteps.first_step_number(source), None, width, a, source) for i, a in enumerate(accepted)]
    return cov.width_coverage(width, [cov.RequestSteps(steps, start)])


def test_a_run_that_exercised_everything_meets_every_minimum() -> None:
    # q=3 from 120: 0 (120), 2 (121-123: 123 boundary, all accepted), 1 (124: 124,125 kept, 126 rejected),
    # 0 at 126 (127 discarded: rollback across ratio-4 and ratio-128), then on through 128
    c = _cov(3, [0, 2, 1, 0, 2, 0], 120)
    assert pol.unmet(c) == []


def test_each_unmet_minimum_names_itself() -> None:
    never_full = _cov(3, [0, 1, 0, 1, 0, 1, 0, 1], 120)  # no step accepted both drafts
    reasons = pol.unmet(never_full)
    assert any(f"'{pol.EVERY_ACCEPT_LENGTH}' not met: no verify step accepted 2 of 2 drafts" in r for r in reasons)
    short = _cov(2, [0, 0, 0], 10)  # 10, 11, 12: no ratio-128 boundary, no window wrap
    reasons = pol.unmet(short)
    assert any(f"'{pol.RATIO128_BATCH}' not met" in r for r in reasons)
    assert any(f"'{pol.WINDOW_BATCH}' not met" in r for r in reasons)
    assert not any(pol.EVERY_ACCEPT_LENGTH in r for r in pol.unmet(_cov(2, [0, 1, 0], 10)))
    all_accepted = _cov(2, [1, 1, 1], 0)  # 0-1, 2-3, 4-5: touches 3 but never rejects
    assert any(f"'{pol.ROLLBACK_RATIO4}' not met: 1 batch(es) touched a ratio-4 boundary, 0 rejected" in r
               for r in pol.unmet(all_accepted))
    kept = _cov(2, [0, 0, 0, 0], 3)  # rejections with the boundary as the seed only: 3, 4, 5, 6 (7 discarded)
    assert not any(pol.ROLLBACK_RATIO4 in r for r in pol.unmet(kept))
    kept_only = _cov(2, [0], 3)
    assert any(pol.ROLLBACK_RATIO4 in r for r in pol.unmet(kept_only))


def test_evidence_too_weak_is_unmet_not_assumed() -> None:
    summary = cov.width_coverage(4, [cov.RequestSteps([], 97)])
    reasons = pol.unmet(summary)
    assert len(reasons) == 1 and f"'{pol.PER_STEP}' not met" in reasons[0] and "summary evidence" in reasons[0]
    no_position = cov.width_coverage(2, [cov.RequestSteps([SpecStep(1, None, 2, 1, TIMING)], None)])
    assert f"'{pol.PER_STEP}' not met" in pol.unmet(no_position)[0]
    assert "prompt's token count is unknown" in pol.unmet(no_position)[0]
    nothing = cov.width_coverage(2, [])
    assert "no speculative request" in pol.unmet(nothing)[0]


def test_printed_positions_suffice() -> None:
    steps = [SpecStep(i, p, 2, a, COMPARE) for i, (p, a) in enumerate([(126, 0), (127, 1), (129, 0), (254, 0)])]
    c = cov.width_coverage(2, [cov.RequestSteps(steps, None)])
    assert c.boundaries is not None
    assert pol.unmet(c) == []
