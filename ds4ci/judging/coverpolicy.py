"""The coverage policy (``[gate] require_coverage``): named minimums a width's run must have exercised.

A width that meets every minimum has shown the cases where exactness bugs live: a rejection at
every draft slot and a fully accepted batch (so partial acceptances had to be rolled back and
replayed), a batch whose rejected drafts lay across a ratio-4 compressor boundary, and batches at the
ratio-128 boundary and the sliding window's wrap. An unmet minimum leaves the width without a verdict
(error, never fail: fail means the answers differ, and an unmet minimum says only that the proof was
not shown), with a reason that names what was not exercised; evidence too weak to tell (a summary only,
positions not fixed) is unmet too, never assumed.
"""

from __future__ import annotations

from collections.abc import Sequence

from ds4ci.judging.coverage import RATIO4, RATIO128, WINDOW, RequestSteps, WidthCoverage, width_coverage
from ds4ci.judging.verdict import ERROR, PASS
from ds4ci.records import WidthResult

PER_STEP = "per-step evidence"
EVERY_ACCEPT_LENGTH = "every accept length"
ROLLBACK_RATIO4 = "rollback across a ratio-4 boundary"
RATIO128_BATCH = "a ratio-128 boundary batch"
WINDOW_BATCH = "a sliding-window wrap batch"
MINIMUMS = (PER_STEP, EVERY_ACCEPT_LENGTH, ROLLBACK_RATIO4, RATIO128_BATCH, WINDOW_BATCH)


def unmet(cov: WidthCoverage) -> list[str]:
    """A reason for each minimum the width's coverage does not meet (empty: all met)."""
    head = f"q={cov.width}: coverage minimum"
    if cov.accept_histogram is None or cov.boundaries is None:
        why = "; ".join(cov.notes[:2]) or "no speculative request"
        return [f"{head} '{PER_STEP}' not met: no per-step line fixes a step's accepted drafts and position "
                f"({cov.source} evidence: {why}); the other minimums cannot be checked"]
    reasons = []
    missing = [k for k, n in enumerate(cov.accept_histogram) if n == 0]
    if missing:
        lengths = ", ".join(map(str, missing))
        reasons.append(f"{head} '{EVERY_ACCEPT_LENGTH}' not met: no verify step accepted {lengths} of "
                       f"{cov.width - 1} drafts (histogram {list(cov.accept_histogram)} over 0..{cov.width - 1})")
    b4 = cov.boundaries[RATIO4]
    if b4.rejected_at_boundary == 0:
        reasons.append(f"{head} '{ROLLBACK_RATIO4}' not met: {b4.batches} batch(es) touched a ratio-4 boundary, "
                       f"{b4.rejected} rejected, none discarded the boundary position")
    for kind, name in ((RATIO128, RATIO128_BATCH), (WINDOW, WINDOW_BATCH)):
        if cov.boundaries[kind].batches == 0:
            reasons.append(f"{head} '{name}' not met: no verify batch touched it (longer prompts or answers reach it)")
    return reasons


def apply(width: WidthResult, requests: Sequence[RequestSteps], required: bool) -> None:
    """The width's coverage record into its results entry; with ``required`` an unmet minimum turns a
    passing width into one without a verdict (error), its reasons naming what was not exercised (a width that
    already failed or could not be judged keeps its verdict and gains the reasons)."""
    cov = width_coverage(width["q"], requests)
    missing = unmet(cov)
    width["coverage"] = cov.to_json(missing)
    if required and missing:
        width["reasons"] = [*width["reasons"], *missing]
        if width["verdict"] == PASS:
            width["verdict"] = ERROR
