"""What the successor models' sensitivity is made of, in one place: a ``Design`` per set.

The models' answers are a forward walk on a cycle of words (``structure``); what makes a wrong cache
change an answer is where the walk is close: the near-ties, which the layers decide. How much one
cache row can move that decision depends on how many rows the layers attend to (the sliding window,
with the compressed rows) and on how much the layers write into the residual stream. The prompts'
lengths place the answer's first verify steps at the ratio-128 boundary and the window's wrap, and
the answer's length is how many decisions a build gets to make. The shipped design was chosen by
measuring real builds with planted faults (docs/benchmarks.md, "Real-engine mutants"); the earlier
ones still write the sets whose recorded runs must keep verifying, and the candidates not yet measured wait by
name (``--design``) until a GPU has judged them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ds4ci.tinymodels.structure import FIRST_NEAR_TIES, NEAR_TIES, SECOND_NEAR_TIES, NearTies


@dataclass(frozen=True)
class Design:
    near_ties: NearTies
    layer_out_std: float  # std of the layers' output projections, which write back into the residual stream
    sliding_window: int  # rows of the raw attention ring (the target's attention.sliding_window)
    prompt_bytes: tuple[int, ...]  # each prompt's size: prompt tokens = bytes + the chat template's four
    max_tokens: int  # the answer's length in the config the set comes with
    # the weight of the compressors' output norms (ratio 4, ratio 128 and the indexer's): how loud a compressed
    # row is, key and value, against the raw ring's rows (1.0: as in every set up to FOURTH)
    compressor_norm: float = 1.0


# The sets of 2026-12-02 (the third is the one the H200 runs of that day used).
THIRD = Design(NEAR_TIES, 0.005, 128, (118, 248), 96)
SECOND = Design(SECOND_NEAR_TIES, 0.005, 128, (118, 248), 96)
FIRST = Design(FIRST_NEAR_TIES, 0.005, 128, (118, 248), 96)
# 2026-12-03: a 16-row window and layers three times as loud. Of the candidates measured on the H200
# (bench/tiny_designs.py), the only one whose answers a real build without rollback changed at every
# width, with the unchanged build passing inside the acceptance band (docs/benchmarks.md).
FOURTH = Design(NEAR_TIES, 0.015, 16, (118, 248), 96)
# 2026-12-05 candidates, to measure on a GPU against the catalogue (FOURTH stayed shipped until 2026-12-07).
# On 2026-12-04 FOURTH missed compressor-not-restored and last-slot-not-rolled-back at q=3 and n-comp-not-restored
# at every width: what slips through is the compressed path. Two levers:
# - louder compressed rows: the compressors' output norm at 3 (an earlier attempt, whose code was lost, measured on
#   the H200 that this caught both q=3 misses with acceptance 51-78 %, and that a louder one left the 30-85 % band)
#   and at 5;
# - the compressors' boundaries on rejected slots: a prompt of P tokens starts the answer's first verify at
#   position P, and each step moves it by its accept length, so P mod 4 alone places the ratio-4 boundaries
#   (p % 4 == 3) relative to every step's rejected slots. A rolled-back ratio-4 compressor is wrong only where a
#   rejected slot held a boundary (its flush rotated the current half into the previous one); the ratio-128 one
#   (no previous half) only where one verify rejected the boundary and the slot after it (the draft past the
#   boundary overwrote the slot of a position the next flush pools again). Simulated over the intended answers
#   of 96 tokens (structure.speculate; which near-ties the layers take is measured on the GPU only, so: none
#   taken / every one), per prompt at q=3, as (ratio-4 boundary on a rejected slot, of those rejecting only
#   the last draft, ratio-128 boundary and the next slot rejected):
#     FOURTH, 122 and 252 tokens:        (7, 1, 1) (8, 1, 0) / (8, 2, 1) (10, 3, 0)
#     FIFTH_ALIGNED, 121 and 250 tokens: (12, 6, 0) (7, 1, 1) / (10, 3, 0) (8, 2, 1)
#   P = 1 (mod 4) is the most ratio-4 steps at q=2 and q=3 (random halves of the near-ties agree), and reaches
#   the ratio-128 boundary at q=4 only; P = 2 (mod 4) reaches it at q=3 and q=4. So the first prompt takes
#   P = 121 and the second P = 250: both still cross the ratio-128 boundaries (127, 255) in their first steps,
#   and the first eight steps still meet every coverage minimum.
FIFTH_LOUD = replace(FOURTH, compressor_norm=3.0)
FIFTH_LOUDER = replace(FOURTH, compressor_norm=5.0)
FIFTH_ALIGNED = replace(FOURTH, prompt_bytes=(117, 246))
FIFTH_LOUD_ALIGNED = replace(FIFTH_LOUD, prompt_bytes=FIFTH_ALIGNED.prompt_bytes)  # both levers
# Shipped from 2026-12-07: on an H100 (sm_90, fork 41ee7d0) every non-equivalent catalogue mutant failed the gate
# with it, 56 of the 62 widths where one can act caught, the unchanged build passing at 96, 192 and 256 tokens with
# acceptance 51-76 % (docs/benchmarks.md, "The catalogue with the shipped models"). FOURTH and the earlier sets stay
# by name: their recorded runs must keep verifying (ds4ci.judging.tinywords.KNOWN_TARGETS).
SHIPPED = FIFTH_LOUD_ALIGNED
# 2026-12-07 candidates, not shipped until a GPU has measured them: what FIFTH_LOUD_ALIGNED's H100 run left uncaught.
# bench/gpu_walk_events.py replays the reference-exact schedule over that run's own answers (it reproduces every
# recorded matched/offered count) and shows where each mutant's state differs from the control's at a kept forward:
# - compressor-last-layer-not-restored at q=2 needs a rejecting step seeded on a ratio-128 boundary (its replayed
#   flush pools the slot the rejected draft overwrote); no q=2 step of those answers is, at 96, 192 or 256 tokens.
#   The second prompt at P = 251 (247 bytes) puts one there: the answers' first 14 tokens are the same for both
#   prompts on the H100 and in the double, and over them a q=2 step seeded at offset 4 rejects, so its seed
#   lands on 255; at q=3 and q=4 a kept flush at 255 still pools a rejected slot. The first prompt stays at
#   P = 121 (1 mod 4), and the first eight steps still meet every coverage minimum.
# - n-comp-not-restored at q=4 shows an unwritten compressed row to a used verify slot at 5 near-tie decisions in
#   96 tokens (and caught nothing there); 192 tokens give 17. At q=2 it reaches only the replayed seed's forward
#   (the rows the last layer keeps from it, no logits): 9 of those in 96 tokens, 19 in 192. The H100's answers of
#   96 tokens are the first halves of its answers of 192 (the same walk), so a mutant whose answer differed
#   within 96 tokens differs there still; the unchanged build's gate takes 38.5 s instead of 29.4 s.
SIXTH_SEEDED = replace(FIFTH_LOUD_ALIGNED, prompt_bytes=(117, 247))
SIXTH_LONG = replace(FIFTH_LOUD_ALIGNED, max_tokens=192)
SIXTH = replace(SIXTH_SEEDED, max_tokens=192)  # both levers
# `ds4ci tiny-models --design NAME`: every design by its name (the default is SHIPPED).
BY_NAME: dict[str, Design] = {
    "FIRST": FIRST, "SECOND": SECOND, "THIRD": THIRD, "FOURTH": FOURTH,
    "FIFTH_LOUD": FIFTH_LOUD, "FIFTH_ALIGNED": FIFTH_ALIGNED, "FIFTH_LOUDER": FIFTH_LOUDER,
    "FIFTH_LOUD_ALIGNED": FIFTH_LOUD_ALIGNED,
    "SIXTH_SEEDED": SIXTH_SEEDED, "SIXTH_LONG": SIXTH_LONG, "SIXTH": SIXTH,
}

