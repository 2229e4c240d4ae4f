"""Planted verifier faults: small seeded ones for the sensitivity benchmark, and the engine's mutants.

``DS4REF_FAULT`` names one fault; it acts only in speculative reference-exact requests, and the
banner, trace and summary still claim reference-exact verification (so only the gate's own
checks can catch it).

The seeded faults (``SEEDED``) fire at most once per request, at the first chance from a
seeded verify step on (``DS4REF_FAULT_SEED`` and the prompt's tokens choose the step, so the
repeats of one prompt fault identically):

- ``near-tie``: the verifier accepts a draft that is the target's runner-up, within
  ``NEAR_TIE_SHARE`` of the argmax's margin over the row's mean, in the batch and in the replay;
- ``stale-compressor``: after a verify batch that rejected a draft fed at a ratio-4 boundary
  position (``p % 4 == 3``), the row written there from the rejected draft is kept: the replay
  does not recompute it (the tiny models' compressor row; the Llama models' KV row);
- ``skip-restore``: the cache is not restored to the step's start before the replay, so the
  replay appends after what the rejected batch wrote.

The engine mutants (``ENGINE_MUTANTS``) carry the names of the real-engine catalogue
(``bench/mutants/lucebox-ds4-reference-exact.toml``, one planted fault per source substitution in
the lucebox engine's reference-exact loop and its snapshot restore) and act as that substitution
does, at every step from the first (the seed is not used): the reference-exact loop in
``refserver.decoding`` says what each one changes there, and ``EQUIVALENT`` why five of them change
nothing in this server either; at the widths of the catalogue's ``equivalent_at`` the others change
nothing here too, for the catalogue's reasons (``tests/unit/refserver/test_engine_mutants.py`` holds
it). They need the tiny models' double, whose cache has the engine's shape, layer for layer
(``refserver.enginecache``).

``DS4REF_FAULT_LOG`` (a path) gets one JSON line per fault that fired (an engine mutant: the first
step where its changed code ran), for the benchmark to tell "fired and missed" from "never
fired"; nothing about it reaches the server's own output.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the environment is read before PyTorch is imported
    import torch

SEEDED = ("near-tie", "stale-compressor", "skip-restore")
# In the catalogue's order; tests/unit/refserver/test_engine_mutants.py holds them equal to its names.
ENGINE_MUTANTS = (
    "no-rollback", "restore-without-replay", "replay-off-by-one", "replay-wrong-position", "accept-off-by-one",
    "bonus-wrong-slot", "snapshot-after-verify", "stale-snapshot", "batched-verify", "compressor-not-restored",
    "n-comp-not-restored", "raw-ring-not-restored", "last-slot-not-rolled-back", "hc-state-not-restored",
    "comp-rows-not-restored", "draft-context-frozen", "attn-compressor-not-restored",
    "indexer-compressor-not-restored", "n-comp-only-not-restored", "n-index-comp-not-restored",
    "raw-ring-layer-0-not-restored", "raw-ring-last-layer-not-restored", "compressor-last-layer-not-restored",
    "rollback-skipped-at-accept-1", "rollback-skipped-at-accept-2", "rollback-skipped-at-accept-3",
    "replay-drops-last-accepted",
)
EQUIVALENT = {  # accepted, and why each changes no answer here
    "hc-state-not-restored": "the double keeps no hyper-connection state (nor does any forward of the engine read "
                             "the cache's), so the restore is the same",
    "comp-rows-not-restored": "compressed rows are addressed by position / ratio; with the counts restored, a row past "
                              "the commit stays invisible until the forward that completes its block writes it again",
    "draft-context-frozen": "the double's draft reads no features (its Markov head and own logits depend on the last "
                            "token alone), and every emitted token is the target's own argmax",
    "indexer-compressor-not-restored": "the double keeps no indexer (under the exact prefill no attention of the "
                                       "engine reads it), so the restore is the same",
    "n-index-comp-not-restored": "the double keeps no indexer rows to count (under the exact prefill no attention of "
                                 "the engine reads them), so the restore is the same",
}
# The parts of the snapshot (refserver.enginecache.PARTS) a mutant's restore leaves out, and in which layer (None:
# every layer; -1: the last). The double has no indexer, so leaving out the indexer's part too changes nothing:
# compressor-not-restored is attn-compressor-not-restored there, n-comp-not-restored n-comp-only-not-restored.
RESTORE_SKIPS: dict[str, tuple[frozenset[str], int | None]] = {
    "compressor-not-restored": (frozenset({"compressor"}), None),
    "n-comp-not-restored": (frozenset({"n_comp"}), None),
    "raw-ring-not-restored": (frozenset({"raw"}), None),
    "comp-rows-not-restored": (frozenset({"comp_rows"}), None),
    "attn-compressor-not-restored": (frozenset({"compressor"}), None),
    "n-comp-only-not-restored": (frozenset({"n_comp"}), None),
    "raw-ring-layer-0-not-restored": (frozenset({"raw"}), 0),
    "raw-ring-last-layer-not-restored": (frozenset({"raw"}), -1),
    "compressor-last-layer-not-restored": (frozenset({"compressor"}), -1),
}
# The restore mutants of state the double does not keep (its restore is the same).
RESTORE_NOOPS = ("hc-state-not-restored", "indexer-compressor-not-restored", "n-index-comp-not-restored")
# The engine's accept (the seed plus the accepted drafts) whose rollback a mutant skips.
ROLLBACK_SKIPPED_AT = {f"rollback-skipped-at-accept-{k}": k for k in (1, 2, 3)}
FAULTS = SEEDED + ENGINE_MUTANTS
NEAR_TIE_SHARE = 0.25  # a near-tie: the runner-up within this share of the argmax's margin over the row's mean (the
# successor models' near-tie words are at 0..0.19 of it, their other words at 0.30 or more)
FIRST_STEP_SPAN = 24  # the fault's first verify step is drawn from 0 .. FIRST_STEP_SPAN-1
RATIO4 = 4
_LOG_LOCK = threading.Lock()


@dataclass(frozen=True)
class FaultPlan:
    """What the environment asked for: a fault, its seed, and where to record that it fired."""

    name: str
    seed: int
    log: Path | None

    def arm(self, prompt: Sequence[int], request: int) -> FaultState:
        digest = hashlib.sha256(f"{self.name}/{self.seed}/".encode() + " ".join(map(str, prompt)).encode()).digest()
        return FaultState(self, int.from_bytes(digest[:8], "little") % FIRST_STEP_SPAN, request)


@dataclass
class FaultState:
    """One request's fault: armed from ``first_step`` on, fires once."""

    plan: FaultPlan
    first_step: int
    request: int
    fired_at: int | None = None
    details: dict[str, int] = field(default_factory=dict)

    def ready(self, name: str, step: int) -> bool:
        """A seeded fault: armed at this step and not fired yet."""
        return self.plan.name == name and self.fired_at is None and step >= self.first_step

    def acts(self, name: str, step: int) -> bool:
        """An engine mutant: whether it is the planted one (it acts at every step; the first is logged)."""
        if self.plan.name != name:
            return False
        if self.fired_at is None:
            self.fire(step)
        return True

    def fire(self, step: int, **details: int) -> None:
        self.fired_at = step
        self.details = dict(details)
        if self.plan.log is None:
            return
        record = {"fault": self.plan.name, "seed": self.plan.seed, "request": self.request,
                  "first_step": self.first_step, "step": step, **details}
        with _LOG_LOCK, self.plan.log.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")


def is_near_tie(row: torch.Tensor, token: int) -> bool:
    """Whether ``token`` is the runner-up of the logits ``row`` within NEAR_TIE_SHARE of the argmax's margin."""
    top2 = row.topk(2)
    if int(top2.indices[1]) != token:
        return False
    best, second = float(top2.values[0]), float(top2.values[1])
    margin = best - float(row.mean())
    return margin > 0.0 and best - second <= NEAR_TIE_SHARE * margin


def stale_boundary(start: int, width: int, accepted: int) -> int | None:
    """The first ratio-4 boundary position a rejected draft of this batch was fed at (None: none).

    The batch feeds the seed at ``start`` and draft j (1-based) at ``start + j``; drafts after the
    ``accepted`` ones were rejected, so their rows are what the replay must recompute."""
    for j in range(accepted + 1, width + 1):
        if (start + j) % RATIO4 == RATIO4 - 1:
            return start + j
    return None
