"""Parsing the speculative loop's per-step and per-token lines into records.

Formats and meanings, as read in the spec loop ``run_deepseek4_dspark_spec_decode`` of
``server/src/deepseek4/deepseek4_dspark_spec.cpp`` (fork Nuked88/lucebox at 41ee7d0, the first commit
with the reference-exact mode; docs/protocol.md has the sources):

- ``[ds4-spec-cmp] step=%ld pos=%d draft=[%d %d %d] tgt=[%d %d %d %d] acc=%d`` (``DS4_TIMING``, the
  first 8 steps): ``step`` is the loop's counter *before* it is incremented (0-based), ``pos`` the
  position of the step's seed token, ``draft`` the candidates of slots 1..3 and ``tgt`` the target's
  argmax of slots 0..3, ``-1`` beyond the step's width. ``acc`` is the loop's ``accept``: the seed
  (slot 0) plus every candidate the target agreed with, so **the drafts accepted are acc - 1** and
  ``acc=1`` means every draft was rejected (the capture's ``mean_accept=0.00`` with ``acc=1``).
- ``[ds4-spec-t] step=%ld q=%d acc=%d | ...`` (``DS4_TIMING``, steps 1..4 and every 32nd): printed
  *after* the counter is incremented (1-based), ``q`` the step's width, ``acc`` the same ``accept``.
- ``[ds4-spec-token] out=%d step=%ld slot=%d token=%d[ bonus]`` (``DS4_TOKEN_TRACE``, LUCE-era builds):
  one line per token the loop emits; slot ``i`` of ``1..accept`` is an accepted draft below
  ``accept`` and the target's bonus token at ``accept`` (marked `` bonus``); ``step`` is 0-based.

Nothing here reads a file; every function raises ValueError with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ds4ci.judging.specsteps import COMPARE, TIMING, SpecStep

_INT = r"(-?[0-9]+)"
_TOKEN = re.compile(r"out=([0-9]+) step=([0-9]+) slot=([0-9]+) token=([0-9]+)( bonus)?")
_COMPARE = re.compile(
    rf"step=([0-9]+) pos=([0-9]+) draft=\[{_INT} {_INT} {_INT}\] tgt=\[{_INT} {_INT} {_INT} {_INT}\] acc=([0-9]+)"
)
_TIMING = re.compile(r"step=([0-9]+) q=([0-9]+) acc=([0-9]+)(?: \|.*)?")
ABSENT = -1  # how the compare line prints a slot beyond the step's width


@dataclass(frozen=True)
class TokenLine:
    """One ``[ds4-spec-token]`` line."""

    out: int  # index of the token among the loop's outputs (the seed token is not traced)
    step: int  # the loop's step counter before it is incremented (0-based)
    slot: int  # 1..accept: slots below accept are accepted drafts, slot == accept is the bonus
    token: int
    bonus: bool


def parse_token(body: str) -> TokenLine:
    match = _TOKEN.fullmatch(body.strip())
    if match is None:
        raise ValueError("expected 'out=<n> step=<n> slot=<n> token=<id>' with an optional ' bonus'")
    out, step, slot, token, bonus = match.groups()
    if int(slot) < 1:
        raise ValueError(f"slot must be 1 or more (slot 0 is the seed, never traced), found slot={slot}")
    return TokenLine(int(out), int(step), int(slot), int(token), bonus is not None)


def _present(values: list[int], what: str) -> int:
    """How many leading slots are printed (not -1); a printed slot after an absent one is malformed."""
    count = next((i for i, v in enumerate(values) if v == ABSENT), len(values))
    if any(v != ABSENT for v in values[count:]):
        raise ValueError(f"{what} has a token after an absent (-1) slot: {values}")
    if any(v < ABSENT for v in values):
        raise ValueError(f"{what} holds a negative token ID other than -1: {values}")
    return count


def parse_compare(body: str) -> SpecStep:
    """A ``[ds4-spec-cmp]`` line; the line must agree with itself (acc is the agreeing prefix)."""
    match = _COMPARE.fullmatch(body.strip())
    if match is None:
        raise ValueError("expected 'step=<n> pos=<n> draft=[<id> <id> <id>] tgt=[<id> <id> <id> <id>] acc=<n>'")
    numbers = [int(g) for g in match.groups()]
    step, pos, draft, tgt, acc = numbers[0], numbers[1], numbers[2:5], numbers[5:9], numbers[9]
    drafts = _present(draft, "draft")
    width = drafts + 1
    if drafts == 0:
        raise ValueError("draft=[...] shows no candidate (the line is printed only for a width of 2 or more)")
    if _present(tgt, "tgt") != width:
        raise ValueError(f"draft=[...] shows {drafts} candidate(s) but tgt=[...] does not show {width} target token(s)")
    agreeing = next((i for i in range(drafts) if draft[i] != tgt[i]), drafts)
    if acc != agreeing + 1:
        raise ValueError(
            f"acc={acc} contradicts the line's own tokens: {agreeing} leading candidate(s) equal the target's, "
            f"so acc (the seed plus the accepted candidates) must be {agreeing + 1}"
        )
    return SpecStep(step=step, position=pos, width=width, accepted=acc - 1, source=COMPARE)


def parse_step_timing(body: str) -> SpecStep:
    """A ``[ds4-spec-t] step=`` line (``body`` starts at ``step=``)."""
    match = _TIMING.fullmatch(body.strip())
    if match is None:
        raise ValueError("expected 'step=<n> q=<n> acc=<n> | ...'")
    step, width, acc = (int(g) for g in match.groups())
    if step < 1:
        raise ValueError("step must be 1 or more (this line is printed after the step counter is incremented)")
    if not 1 <= acc <= width:
        raise ValueError(f"acc={acc} is outside 1..q={width} (acc counts the seed plus the accepted candidates)")
    return SpecStep(step=step, position=None, width=width, accepted=acc - 1, source=TIMING)
