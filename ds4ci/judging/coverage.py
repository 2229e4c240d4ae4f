"""Proof coverage: what a width's speculative requests exercised, from their per-step evidence.

A pure function of ``SpecStep`` records (``judging.specsteps``) and each request's prompt token
count. Per width: the accept-length histogram, the rejections per draft slot, and the verify
batches that touched a compressor boundary or the sliding window's wrap, with how many of them
rejected and how many rejected a draft at or before the boundary, and the first positions of such batches.

A verify step at position ``p`` with width ``q`` feeds the positions ``p .. p+q-1`` (the seed
token and its ``q-1`` drafts). It touches
- a ratio-4 boundary when one of them has ``pos % 4 == 3`` (a ratio-4 compressor row completes),
- the ratio-128 boundary when one has ``pos % 128 == 127``,
- the window edge when one is a multiple of 128, at least 128: where the DS4 model's 128-row raw ring wraps
  (the tiny models' 16-row window wraps there too, and also in between; those wraps are not counted).
It rejected when it accepted fewer than ``q-1`` drafts, and it rejected at a boundary when the
boundary position lies at or after its first rejected slot (the row computed there must be discarded:
what the gate sees is parity after it, not the discarding).

Positions come from the lines where they are printed (the compare lines); elsewhere each step's
position is the previous step's plus its accepted drafts plus one, starting at the prompt's token
count (the first verify batch starts at the first generated token). Where neither fixes a position
(a step's accepted count unknown, a gap in the step numbers), that step's batch is not counted at
the boundaries. Counts cover the steps the lines show, and ``notes`` say where that is not every
step. Each loop step is taken from the strongest family of lines that printed it (token trace,
compare, timing); a request with none has only its summary. Step numbers in notes are 0-based.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, cast

from ds4ci.judging.specsteps import SOURCES, SpecStep, loop_index
from ds4ci.records import BoundariesRecord, BoundaryRecord, CoverageRecord, CoverageSource

SUMMARY = "summary"  # a request with no per-step lines: only its summary
RATIO4: Final = "ratio4"
RATIO128: Final = "ratio128"
WINDOW: Final = "window"
BOUNDARIES = (RATIO4, RATIO128, WINDOW)
# What reports call each kind (after "a"; each recurs along a long answer)
BoundaryKind = Literal["ratio4", "ratio128", "window"]
BOUNDARY_NAMES: dict[BoundaryKind, str] = {RATIO4: "ratio-4 compressor boundary", RATIO128: "ratio-128 compressor boundary",
                  WINDOW: "128-row window's wrap"}
WINDOW_SIZE = 128
FIRST_POSITIONS = 3  # how many first positions each boundary kind records


@dataclass(frozen=True)
class RequestSteps:
    """One speculative request's per-step records and its prompt token count (None where unknown)."""

    steps: Sequence[SpecStep]
    prompt_tokens: int | None


@dataclass(frozen=True)
class BoundaryCoverage:
    batches: int  # verify batches touching it
    rejected: int  # of those, batches that rejected a draft
    rejected_at_boundary: int  # of those, batches whose rejection discarded the boundary position
    first_positions: tuple[int, ...]  # distinct start positions of the first touching batches
    first_rejected_positions: tuple[int, ...]  # distinct start positions of the first that rejected

    def to_json(self) -> BoundaryRecord:
        return {"batches": self.batches, "rejected": self.rejected, "rejected_at_boundary": self.rejected_at_boundary,
                "first_positions": list(self.first_positions),
                "first_rejected_positions": list(self.first_rejected_positions)}


@dataclass(frozen=True)
class WidthCoverage:
    width: int
    requests: int
    sources: tuple[str, ...]  # per request, which evidence it came from
    steps: int | None  # verify steps seen (None: summary only)
    accept_histogram: tuple[int, ...] | None  # index k: steps that accepted k drafts (0..width-1)
    rejections_per_slot: tuple[int, ...] | None  # index s-1: steps whose first rejected draft was slot s
    matched: int | None
    offered: int | None
    boundaries: dict[str, BoundaryCoverage] | None  # None: some position was not fixed by the evidence
    notes: tuple[str, ...] = field(default=())  # why something says unknown

    @property
    def source(self) -> str:
        """The weakest evidence any request of the width came from."""
        order = (*SOURCES, SUMMARY)
        return max(self.sources, key=order.index) if self.sources else SUMMARY

    def to_json(self, unmet: Sequence[str] = ()) -> CoverageRecord:
        """The results.json record; ``unmet``: the policy's reasons (judging.coverpolicy)."""
        bounds = self.boundaries
        return {
            "width": self.width, "requests": self.requests, "source": cast(CoverageSource, self.source),
            "sources": [cast(CoverageSource, s) for s in self.sources], "steps": self.steps,
            "accept_histogram": None if self.accept_histogram is None else list(self.accept_histogram),
            "rejections_per_slot": None if self.rejections_per_slot is None else list(self.rejections_per_slot),
            "matched": self.matched, "offered": self.offered,
            "boundaries": None if bounds is None else BoundariesRecord(
                ratio4=bounds[RATIO4].to_json(), ratio128=bounds[RATIO128].to_json(), window=bounds[WINDOW].to_json()),
            "notes": list(self.notes), "unmet": list(unmet),
        }


def prompt_tokens(response: object) -> int | None:
    """``usage.prompt_tokens`` of a chat completion, when it is a non-negative integer; else None."""
    usage = response.get("usage") if isinstance(response, dict) else None
    value = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def requests(steps: Sequence[Sequence[SpecStep]], counts: Sequence[int | None]) -> list[RequestSteps]:
    """Each request's steps with its prompt token count (both in the lifecycle's order)."""
    if len(steps) != len(counts):
        raise ValueError(f"coverage: {len(steps)} requests' steps but {len(counts)} prompt token counts")
    return [RequestSteps(tuple(s), n) for s, n in zip(steps, counts, strict=True)]


def touched(kind: str, start: int, width: int) -> int | None:
    """The first position of ``start .. start+width-1`` at a boundary of ``kind``, or None."""
    for pos in range(start, start + width):
        if (kind == RATIO4 and pos % 4 == 3) or (kind == RATIO128 and pos % 128 == 127) or (
                kind == WINDOW and pos >= WINDOW_SIZE and pos % WINDOW_SIZE == 0):
            return pos
    return None


def merged(steps: Sequence[SpecStep]) -> tuple[str, list[SpecStep]]:
    """One record per loop step, from the strongest family that printed it, in loop order, and the
    weakest family that contributed (``SUMMARY`` and no steps where none did). The families agree
    where they overlap (the counters' judging checks that); a weaker one fills the steps a stronger
    one left out (the compare lines stop after the first few steps, the timing lines print some)."""
    best: dict[int, SpecStep] = {}
    for step in steps:
        if step.source not in SOURCES:
            continue
        key = loop_index(step)
        if key not in best or SOURCES.index(step.source) < SOURCES.index(best[key].source):
            best[key] = step
    chosen = [best[k] for k in sorted(best)]
    if not chosen:
        return SUMMARY, []
    return max((c.source for c in chosen), key=SOURCES.index), chosen


def positions(steps: Sequence[SpecStep], prompt_tokens: int | None) -> tuple[list[int | None], list[str]]:
    """Each step's start position where the evidence fixes it (None elsewhere), and why not where not.

    ``steps`` are in loop order (``merged``). A printed position fixes itself; the loop's first step
    starts at the prompt's token count; any other step starts where the step before it (the loop's
    previous step, its position and accepted count known) ended."""
    out: list[int | None] = []
    why: list[str] = []
    for i, step in enumerate(steps):
        prev = steps[i - 1] if i else None
        before = out[-1] if out else None
        here = loop_index(step)
        if step.position is not None and step.position >= 0:
            out.append(step.position)
        elif step.position is not None:
            out.append(None)
            why.append(f"step {here} printed position {step.position}")
        elif here == 0:
            out.append(prompt_tokens)
            if prompt_tokens is None:
                why.append("step 0 has no position and the prompt's token count is unknown")
        elif prev is not None and before is not None and prev.accepted is not None and here == loop_index(prev) + 1:
            out.append(before + prev.accepted + 1)
        else:
            out.append(None)
            if prev is None or here != loop_index(prev) + 1:
                why.append(f"no line for step {here - 1}, so step {here}'s position is unknown")
            elif before is not None:
                why.append(f"step {loop_index(prev)} does not say how many drafts it accepted, so step {here}'s "
                           "position is unknown")
    return out, why


def _gaps(steps: Sequence[SpecStep]) -> str | None:
    loop = [loop_index(s) for s in steps]
    if loop == list(range(len(loop))):
        return None
    return f"per-step lines for {len(loop)} step(s) only (steps {loop[0]}..{loop[-1]}, 0-based, with gaps)"


def _boundaries(batches: list[tuple[int, SpecStep]]) -> dict[str, BoundaryCoverage]:
    result = {}
    for kind in BOUNDARIES:
        hit = rej = back = 0
        first: list[int] = []
        first_rej: list[int] = []
        for start, step in batches:
            at = touched(kind, start, step.width)
            if at is None:
                continue
            hit += 1
            if len(first) < FIRST_POSITIONS and start not in first:
                first.append(start)
            if step.accepted is not None and step.accepted < step.width - 1:
                rej += 1
                back += at >= start + step.accepted + 1
                if len(first_rej) < FIRST_POSITIONS and start not in first_rej:
                    first_rej.append(start)
        result[kind] = BoundaryCoverage(hit, rej, back, tuple(first), tuple(first_rej))
    return result


def width_coverage(width: int, requests: Sequence[RequestSteps]) -> WidthCoverage:
    """The coverage of one width's speculative requests, over the steps their evidence shows.

    Counts cover the steps the lines show (``notes`` say where that is not every step); a step
    with an impossible accept count makes the width's counts unknown (malformed evidence)."""
    sources: list[str] = []
    histogram = [0] * width
    slots = [0] * max(width - 1, 0)
    matched = offered = n_steps = 0
    malformed = False
    batches: list[tuple[int, SpecStep]] = []
    notes: list[str] = []
    for index, request in enumerate(requests):
        where = f"request {index + 1}"
        source, steps = merged(request.steps)
        sources.append(source)
        if source == SUMMARY:
            notes.append(f"{where}: no per-step lines, only the summary")
            continue
        n_steps += len(steps)
        gaps = _gaps(steps)
        if gaps:
            notes.append(f"{where}: {gaps}")
        starts, why = positions(steps, request.prompt_tokens)
        notes.extend(f"{where}: {w}" for w in why[:1])
        for step, start in zip(steps, starts, strict=True):
            if step.accepted is None:
                notes.append(f"{where}: step {loop_index(step)} does not say how many drafts it accepted")
                continue
            if not 0 <= step.accepted <= step.width - 1 or step.width > width:
                notes.append(f"{where}: step {loop_index(step)} accepted {step.accepted} of {step.width - 1} drafts "
                             f"at width {width}")
                malformed = True
                continue
            histogram[step.accepted] += 1
            matched += step.accepted
            offered += step.width - 1
            if step.accepted < step.width - 1:
                slots[step.accepted] += 1
            if start is not None:
                batches.append((start, step))
    counted = not malformed and sum(histogram) > 0
    return WidthCoverage(
        width=width, requests=len(requests), sources=tuple(sources),
        steps=n_steps if any(s != SUMMARY for s in sources) else None,
        accept_histogram=tuple(histogram) if counted else None,
        rejections_per_slot=tuple(slots) if counted else None,
        matched=matched if counted else None,
        offered=offered if counted else None,
        boundaries=_boundaries(batches) if counted and batches else None,
        notes=tuple(notes[:20]),
    )


def compact_line(rec: CoverageRecord) -> str:
    """One line for a width's record, as the terminal table and the pull-request comment show it."""
    head = f"q={rec['width']} coverage ({rec['source']})"
    hist, slots, bounds = rec["accept_histogram"], rec["rejections_per_slot"], rec["boundaries"]
    if hist is None or slots is None:
        return f"{head}: not measurable ({'; '.join(rec['notes'][:1]) or 'no speculative requests'})"
    last = rec["width"] - 1
    text = (f"{head}: accepted 0..{last} drafts {'/'.join(map(str, hist))} steps; "
            f"rejections at slot 1..{last} {'/'.join(map(str, slots))}")
    if bounds is None:
        return text + "; boundaries unknown"
    parts = []
    for kind, b in ((RATIO4, bounds["ratio4"]), (RATIO128, bounds["ratio128"]), (WINDOW, bounds["window"])):
        first = b["first_rejected_positions"]
        at = f" first at {','.join(map(str, first))}" if first else ""
        parts.append(f"{kind} {b['rejected']}/{b['batches']} rejected{at}")
    return text + "; " + "; ".join(parts)
