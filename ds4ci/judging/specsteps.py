"""Per-step evidence of one speculative request: what each verify step offered and accepted.

The parsers of the build's per-step lines (the per-token trace, the draft/target compare lines,
the per-step timing lines) produce these records; proof coverage (boundaries crossed, rejections
per slot, accept-length histograms) is computed from them. Nothing here reads a file.
"""

from __future__ import annotations

from dataclasses import dataclass

# Which family of lines a step came from, strongest first.
TOKEN_TRACE = "token-trace"  # noqa: S105 (a line family, not a secret): [ds4-spec-token] out= step= slot= token=[ bonus]
COMPARE = "compare"  # [ds4-spec-cmp] step= pos= draft=[..] tgt=[..] acc=
TIMING = "timing"  # [ds4-spec-t] step= q= acc=
SOURCES = (TOKEN_TRACE, COMPARE, TIMING)


@dataclass(frozen=True)
class SpecStep:
    """One verify step of the speculative loop, as the build's per-step lines show it."""

    step: int  # the loop's step counter, as the build printed it
    position: int | None  # absolute position of the verify batch's first token, where the evidence fixes it
    width: int  # tokens verified in this step (q); the drafts offered are width - 1
    accepted: int | None  # drafts accepted in this step, 0..width-1; None where the line does not say
    source: str  # one of SOURCES


def first_step_number(source: str) -> int:
    """The step number a request's first verify step prints: ``[ds4-spec-t] step=`` prints the counter after it is
    incremented (1-based); the compare and token lines print it before (0-based) (judging.steplines)."""
    return 1 if source == TIMING else 0


def loop_index(step: SpecStep) -> int:
    """The step's 0-based place in the request's loop, whatever family printed it."""
    return step.step - first_step_number(step.source)
