"""The binary search over a first-parent range, with skips, independent of how a step is run.

Positions run from 0 (the good end) to ``n`` (the bad end). The search keeps the last position known to pass
(``lo``) and the first known to fail (``hi``), the ends standing for themselves until they are run; each step
runs the untested position nearest the middle of the two (a skipped one is never run again, as ``git bisect
skip`` does). Once nothing is left to run between them, an end that the answer rests on and that was never
run is run now (so the answer names a failing commit that was seen failing, and a passing one that was seen
passing): a bad end that passes, or a good end that fails, means no culprit in the range.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ds4ci.records import BisectCommit, BisectStep

Outcome = Literal["pass", "fail", "skip", "stop"]
Verdict = Literal["found", "not_found", "no_verdict"]


@dataclass
class Search:
    commits: Sequence[BisectCommit]  # [good, ..., bad], first parents, oldest first
    steps: list[BisectStep] = field(default_factory=list)
    verdict: Verdict = "no_verdict"
    reason: str = ""
    first_bad: int | None = None
    last_good: int | None = None
    candidates: tuple[int, ...] = ()  # with only skipped commits left: the positions the culprit may be

    def outcome_at(self, position: int) -> Outcome | None:
        return next((s["outcome"] for s in self.steps if s["position"] == position), None)

    def step_at(self, position: int | None) -> BisectStep | None:
        return next((s for s in self.steps if s["position"] == position), None)


RunStep = Callable[[int, BisectCommit], BisectStep]


def expected_steps(commits: int) -> int:
    """Gate runs a range of ``commits`` (good end included) needs without skips: log2 of the candidates."""
    candidates = commits - 1
    return math.ceil(math.log2(candidates)) if candidates > 1 else 1


def _next(search: Search, lo: int, hi: int) -> int | None:
    untested = [i for i in range(lo + 1, hi) if search.outcome_at(i) is None]
    middle = (lo + hi) / 2
    return min(untested, key=lambda i: (abs(i - middle), i)) if untested else None


def _run(search: Search, run_step: RunStep, position: int) -> Outcome:
    step = run_step(position, search.commits[position])
    search.steps.append(step)
    return step["outcome"]


def bisect(search: Search, run_step: RunStep) -> Search:
    """Search ``search.commits`` (at least two: the good end first, the bad end last) with ``run_step``; each
    step is in ``search.steps`` as soon as it is done (an interrupt keeps the finished ones)."""
    n = len(search.commits) - 1
    lo, hi = 0, n
    while True:
        chosen = _next(search, lo, hi)
        if chosen is None:  # an end the answer rests on, not run yet: the bad end first, then the good end
            chosen = next((end for end in (n, 0) if end in (lo, hi) and search.outcome_at(end) is None), None)
        if chosen is None:
            return _conclude(search, lo, hi)
        outcome = _run(search, run_step, chosen)
        if outcome == "stop":
            return _stopped(search)
        if outcome == "pass" and chosen == n:
            return _not_found(search, "the bad end passes: no commit of the range breaks the gate")
        if outcome == "fail" and chosen == 0:
            return _not_found(search, "the good end fails already: the culprit is not in the range")
        if outcome == "skip" and chosen in (0, n):
            which = "good" if chosen == 0 else "bad"
            search.reason = f"the {which} end could not be judged ({search.steps[-1]['reason']}); no verdict"
            return search
        if outcome == "pass":
            lo = chosen
        elif outcome == "fail":
            hi = chosen


def _conclude(search: Search, lo: int, hi: int) -> Search:
    between = tuple(i for i in range(lo + 1, hi))  # every one of them skipped
    if between:
        search.candidates = (*between, hi)
        search.last_good = lo
        search.reason = (f"only skipped commits are left between the last passing and the first failing one: the "
                         f"culprit is one of {len(search.candidates)} commits; no verdict")
        return search
    search.verdict, search.first_bad, search.last_good = "found", hi, lo
    search.reason = (f"{search.commits[hi]['sha'][:12]} is the first failing commit, "
                     f"{search.commits[lo]['sha'][:12]} the last passing one")
    return search


def _not_found(search: Search, reason: str) -> Search:
    search.verdict, search.reason = "not_found", reason
    return search


def _stopped(search: Search) -> Search:
    last = search.steps[-1]
    search.reason = f"stopped at {last['sha'][:12]}: {last['reason']}"
    return search
