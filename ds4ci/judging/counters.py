"""A speculative request's matched/offered counters: printed, or derived from what the build printed, never guessed.

The strict dialect prints them (``matched=`` ``offered=``). Every public build prints a counterless
summary instead, ``gen=%d steps=%ld mean_accept=%.2f/%.2f q_cap=%d full_snap=%d``, whose means are
``accept_sum/steps`` and ``offered_sum/steps`` (spec loop of 41ee7d0, docs/protocol.md). From it:

- offered: reference-exact fixes the width, so every step offers q-1 drafts: offered = steps x (q-1),
  and the printed offered mean must be exactly that over steps (else the width was not fixed);
- matched: the integers m in 0..offered whose ``m/steps`` prints as the summary's accepted mean with
  two decimals, narrowed by the loop's arithmetic (each step emits its accepted drafts plus one
  token and only the last step can be cut short, so gen <= m + steps <= gen + q - 1) and by every
  per-step line the build printed (``judging.steplines``: a step's accepted drafts are fixed where a
  line shows them, and at most q-1 elsewhere).

Exactly one integer left: the counters are derived. More than one (the two decimals of a mean over
many steps allow a few): the counters are the range ``matched_min..matched_max``, and whatever they
must prove is proven at the safe bound, ``matched_max`` (the fewest rejected drafts). None left, or
two lines that disagree: a contradiction, which fails, naming both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Final

from ds4ci.judging.protocol import RequestLog, SpecSummary
from ds4ci.judging.specsteps import TOKEN_TRACE, SpecStep, loop_index
from ds4ci.judging.steplines import TokenLine
from ds4ci.records import CountersSource

PRINTED: Final = "printed"
DERIVED: Final = "derived"


@dataclass(frozen=True)
class Counters:
    matched: int | None  # the count, where the evidence fixes one
    offered: int | None
    source: CountersSource | None  # PRINTED | DERIVED | None (no counters)
    contradictions: tuple[str, ...] = ()  # the evidence disagrees with itself: fails
    missing: str = ""  # why there are no counters, when there are none and nothing contradicts
    matched_min: int | None = None  # the range the evidence allows (both = matched when it fixes one)
    matched_max: int | None = None  # the safe bound: offered - matched_max is the fewest rejected drafts
    allowed: str = ""  # how the range was found, where it is one


def token_steps(tokens: Sequence[TokenLine], width: int) -> tuple[list[SpecStep], list[str]]:
    """The steps a complete per-token trace shows, and what in it is inconsistent.

    Per step the slots run 1..k; the bonus slot (k == accept) gives k - 1 accepted drafts. A step
    without a bonus line was cut short (only the last may be): its accepted drafts are unknown.
    """
    problems: list[str] = []
    outs = [t.out for t in tokens]
    if outs != list(range(len(tokens))):
        problems.append(f"the per-token trace's out= values are not 0, 1, 2, ... in order (found {outs[:12]})")
    by_step: dict[int, list[TokenLine]] = {}
    for line in tokens:
        by_step.setdefault(line.step, []).append(line)
    order = list(by_step)
    if order != list(range(len(order))):
        problems.append(f"the per-token trace's step= values are not 0, 1, 2, ... in order (found {order[:12]})")
    steps = []
    for index, (step, lines) in enumerate(by_step.items()):
        slots = [t.slot for t in lines]
        bonus = [t.slot for t in lines if t.bonus]
        if slots != list(range(1, len(lines) + 1)) or len(slots) > width:
            problems.append(f"step {step} of the per-token trace has slots {slots}, expected 1..k with k <= q={width}")
        elif bonus and bonus != [slots[-1]]:
            problems.append(f"step {step} of the per-token trace marks slot(s) {bonus} bonus; only its last slot can be")
        elif not bonus and index != len(by_step) - 1:
            problems.append(f"step {step} of the per-token trace has no bonus token, and only the last step can be cut short")
        accepted = bonus[0] - 1 if bonus else None
        steps.append(SpecStep(step=step, position=None, width=width, accepted=accepted, source=TOKEN_TRACE))
    return steps, problems


def request_steps(log: RequestLog, width: int) -> tuple[SpecStep, ...]:
    """Every per-step record of one request, all sources (compare, timing, per-token), in log order then
    token order: what proof coverage reads. ``width`` is the arm's q (the per-token lines do not print it)."""
    return (*log.steps, *token_steps(log.tokens, width)[0])


def _known(steps: Sequence[SpecStep], lines: Sequence[str], q: int, total: int) -> tuple[dict[int, int], list[str]]:
    """Accepted drafts per loop index where a line fixes them; contradictions between lines and with the summary."""
    known: dict[int, tuple[int, str]] = {}
    problems = []
    for step, line in zip(steps, lines, strict=True):
        index = loop_index(step)
        if step.width != q:
            problems.append(f"a per-step line shows width {step.width} but reference-exact fixes the width at q={q}: {line}")
        if index >= total:
            problems.append(f"a per-step line is for step {index} (0-based) but the summary says steps={total}: {line}")
        if step.accepted is None:
            continue
        if index in known and known[index][0] != step.accepted:
            problems.append(
                f"two per-step lines disagree on step {index} (0-based): {known[index][1]} vs {line}"
            )
        known.setdefault(index, (step.accepted, line))
    return {k: v for k, (v, _) in known.items()}, problems


def _means(mean: str | None) -> tuple[Decimal, Decimal, str, str] | None:
    if mean is None:
        return None
    accepted, _, offered = mean.partition("/")
    try:
        return Decimal(accepted), Decimal(offered), accepted, offered
    except InvalidOperation:
        return None


def _prints_as(value: int, steps: int, printed: str) -> bool:
    """Whether value/steps prints as ``printed`` with the summary's own number of decimals (C's %.Nf)."""
    decimals = len(printed.partition(".")[2])
    return f"{value / steps:.{decimals}f}" == printed


def derive(
    summary: SpecSummary, q: int, steps: Sequence[SpecStep], lines: Sequence[str], tokens: Sequence[TokenLine] = (),
) -> Counters:
    """The request's counters from its summary and per-step evidence (``lines`` are ``steps``' texts)."""
    all_steps, all_lines = list(steps), list(lines)
    problems: list[str] = []
    if tokens:
        traced, problems = token_steps(tokens, q)
        all_steps += traced
        all_lines += [f"[ds4-spec-token] lines of step {s.step}" for s in traced]
        if len(tokens) != summary.gen:
            problems.append(f"the per-token trace holds {len(tokens)} token(s) but the summary says gen={summary.gen}")
    known, found = _known(all_steps, all_lines, q, summary.steps)
    problems += found
    if summary.matched is not None and summary.offered is not None:
        low = sum(known.values())
        high = low + (summary.steps - len(known)) * (q - 1)
        if not low <= summary.matched <= high:
            problems.append(
                f"the summary's matched={summary.matched} contradicts the per-step lines, which allow {low}..{high}"
            )
        return Counters(summary.matched, summary.offered, PRINTED, tuple(problems),
                        matched_min=summary.matched, matched_max=summary.matched)
    if summary.steps <= 0:
        return Counters(None, None, None, tuple(problems), "the summary counts no step")
    means = _means(summary.mean_accept)
    if means is None:
        return Counters(None, None, None, tuple(problems), "the summary prints neither counters nor mean_accept")
    accepted_mean, _, accepted_text, offered_text = means
    offered = summary.steps * (q - 1)
    if not _prints_as(offered, summary.steps, offered_text):
        problems.append(
            f"the summary's offered mean {offered_text} is not q-1={q - 1} per step: the width was not fixed at q={q} "
            f"({summary.mean_accept} over steps={summary.steps})"
        )
    spread = summary.steps * Decimal("0.01")
    centre = accepted_mean * summary.steps
    by_means = [
        m for m in range(max(0, math.floor(centre - spread)), min(offered, math.ceil(centre + spread)) + 1)
        if _prints_as(m, summary.steps, accepted_text)
    ]
    by_loop = [m for m in by_means if summary.gen <= m + summary.steps <= summary.gen + q - 1]
    low = sum(known.values())
    high = low + (summary.steps - len(known)) * (q - 1)
    fits = [m for m in by_loop if low <= m <= high]
    if not fits:
        problems.append(
            f"no matched count fits the evidence: mean_accept={summary.mean_accept} over steps={summary.steps} allows "
            f"{_span(by_means)}, gen={summary.gen} <= matched + steps <= gen + q - 1 allows {_span(by_loop)}, "
            f"and the per-step lines allow {low}..{high}"
        )
        return Counters(None, offered, None, tuple(problems))
    if problems:  # evidence that contradicts itself derives nothing
        return Counters(None, offered, None, tuple(problems))
    allowed = (f"mean_accept={summary.mean_accept} over steps={summary.steps}, gen={summary.gen} and the per-step "
               f"lines allow matched = {_span(fits)}")
    return Counters(fits[0] if len(fits) == 1 else None, offered, DERIVED, (),
                    matched_min=fits[0], matched_max=fits[-1], allowed=allowed if len(fits) > 1 else "")


def _span(values: Sequence[int]) -> str:
    if not values:
        return "none"
    if len(values) > 1 and list(values) == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}..{values[-1]}"
    return ", ".join(map(str, values))
