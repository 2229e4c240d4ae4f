#!/usr/bin/env python3
"""Where three restore mutants can act on a GPU's own answers: the reference-exact schedule replayed over a capture.

    .venv/bin/python bench/gpu_walk_events.py BUNDLE.tar.gz [BUNDLE.tar.gz ...] [--design NAME]

BUNDLE is a sealed gate bundle of the unchanged build (``ds4ci gate``'s evidence folder as a tar.gz) run with
``ds4ci tiny-models DIR --seed 1 --design NAME``. Its target-only answers are the GPU's greedy walk; the draft
of the tiny models proposes from the last token alone (``structure.Structure.guess``, what the draft file's
DSpark Markov head decides), so the reference-exact loop's schedule over that walk (each step's seed position,
accept length and rejected slots) follows from the answer, and the script checks it against the counters the
gate recorded (matched/offered per prompt and width): a schedule that does not reproduce them is refused.

Over that schedule it keeps, for the engine's cache as the fork 41ee7d0 updates it (docs/benchmarks.md, "The
six widths"), which position each slot of the last layer's ratio-128 compressor and raw ring holds and each
compressed layer's visible-row count, with the snapshot restore leaving one part out, and prints where the
mutant's state differs from the unchanged build's at a forward whose result is kept:

- ``n-comp-not-restored`` (and ``n-comp-only-not-restored``): a forward at ``p`` that sees a compressed row
  not yet written (the stale count beyond ``(p + 1) / ratio``): ``logits`` where the forward's argmax is used
  (a verify slot up to the accept point), ``replay`` where it only writes the cache (its logits are dropped);
  ``*`` marks a position whose decision is a near-tie of the models;
- ``compressor-last-layer-not-restored``: a kept ratio-128 flush (``p % 128 == 127``) that pools a slot a
  rejected draft wrote;
- ``raw-ring-last-layer-not-restored``: a forward whose argmax is used and whose last-layer attention reads a
  ring slot holding a rejected draft's row.

No GPU and no engine: it reads the capture and the models' structure. Whether an event changes an answer is
the real layers' to decide; where there is no event the mutant's state equals the unchanged build's there.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ds4ci.tinymodels import design as designs
from ds4ci.tinymodels import structure
from ds4ci.tinymodels.bundle import CHAT_TEMPLATE_TOKENS, tiny_structure
from ds4ci.tinymodels.shapes import Shape

RATIOS = Shape().compress_ratios  # 0, 0, 4, 128: layer 2 the ratio-4 compressor, layer 3 (the last) ratio 128
LAST = len(RATIOS) - 1
RING128 = 128


@dataclass
class Cache:
    """What the engine's cache holds, by position label: the state the three mutants' restores leave out."""

    n_swa: int
    n_comp: dict[int, int] = field(default_factory=dict)  # per compressed layer
    comp_slots: dict[int, int] = field(default_factory=dict)  # last layer's ratio-128 compressor: slot -> position
    ring: dict[int, int] = field(default_factory=dict)  # last layer's raw ring: slot -> position

    def copy(self) -> Cache:
        return Cache(self.n_swa, dict(self.n_comp), dict(self.comp_slots), dict(self.ring))


@dataclass(frozen=True)
class Event:
    pos: int
    kind: str
    near_tie: bool

    def __str__(self) -> str:
        return f"{self.pos}{'*' if self.near_tie else ''}:{self.kind}"


def _forward(cache: Cache, p: int, role: str, kept: bool, near: bool, events: dict[str, list[Event]]) -> None:
    """One single-token forward at position ``p`` (``role``: prefill, used: a verify slot whose argmax is used,
    rejected: one past the accept point, replay): what it reads, then what it writes; ``kept``: its writes stay."""
    used = role == "used"
    for layer, ratio in enumerate(RATIOS):
        if ratio and role in ("used", "replay") and max(cache.n_comp.get(layer, 0), (p + 1) // ratio) > (p + 1) // ratio:
            events["n-comp"].append(Event(p, f"{'logits' if used else 'replay'}@L{layer}", near and used))
    if used and p >= cache.n_swa - 1:  # the ring is full: every slot but p's own is read as a position behind p
        wrong = [s for s in range(cache.n_swa) if s != p % cache.n_swa and cache.ring.get(s, -1) > p]
        if wrong:
            events["raw-ring-last"].append(Event(p, "logits", near))
    cache.ring[p % cache.n_swa] = p
    cache.comp_slots[p % RING128] = p
    if p % RING128 == RING128 - 1 and kept:
        block = p - (RING128 - 1)
        if any(cache.comp_slots.get(s) != block + s for s in range(RING128)):
            events["compressor-last"].append(Event(p, "flush", False))
    for layer, ratio in enumerate(RATIOS):
        if ratio:
            cache.n_comp[layer] = max(cache.n_comp.get(layer, 0), (p + 1) // ratio)


def schedule(answer: list[int], guess: dict[int, int], q: int, longer: list[int] | None = None) -> structure.SpecRun:
    """``structure.speculate``'s loop, except that the last step compares its drafts with the target's tokens past
    the answer's end as the engine does (it counts them matched and cuts the output): ``longer`` is the same
    prompt's answer from a longer capture (its prefix), None where there is none (the last step then counts
    only the drafts inside the answer)."""
    n, tail = len(answer), longer if longer is not None and longer[:len(answer)] == answer else answer
    done, matched, offered, lengths = 1, 0, 0, []
    while done < n:
        tok, drafts = answer[done - 1], []
        for _ in range(q - 1):
            tok = guess[tok]
            drafts.append(tok)
        accepted = 0
        while accepted < len(drafts) and done + accepted < len(tail) and drafts[accepted] == tail[done + accepted]:
            accepted += 1
        matched, offered = matched + accepted, offered + len(drafts)
        lengths.append(accepted)
        done += accepted + 1
    return structure.SpecRun(q, matched, offered, tuple(lengths))


def events_over(run: structure.SpecRun, answer: list[int], prompt_tokens: int, st: structure.Structure, n_swa: int,
                skip: str) -> dict[str, list[Event]]:
    """The schedule ``run`` over ``answer`` with the restore leaving ``skip`` out (``""``: the unchanged build,
    which must show none)."""
    q = run.width
    events: dict[str, list[Event]] = {"n-comp": [], "compressor-last": [], "raw-ring-last": []}
    cache = Cache(n_swa)
    for p in range(prompt_tokens):  # the prefill, token by token under the exact prefill
        _forward(cache, p, "prefill", True, False, events)
    pos, done = prompt_tokens, 1  # the first answer token is the seed of the first step, at position P
    for a in run.accept_lengths:
        accept = a + 1  # the seed and the accepted drafts, as the engine counts
        snap = cache.copy()
        for i in range(q):
            idx = done - 1 + i
            near = idx < len(answer) and answer[idx] in st.near_ties
            _forward(cache, pos + i, "used" if i < accept else "rejected", accept >= q, near, events)
        if accept < q:  # the rollback: restore all but `skip`, then replay the seed and the accepted drafts
            restored = snap.copy()
            if skip == "n-comp":
                restored.n_comp = cache.n_comp
            if skip == "compressor-last":
                restored.comp_slots = cache.comp_slots
            if skip == "raw-ring-last":
                restored.ring = cache.ring
            cache = restored
            for i in range(accept):
                _forward(cache, pos + i, "replay", True, False, events)
        pos += accept
        done += accept
    return events


def _members(bundle: str) -> tuple[dict[int, list[int]], dict[int, dict[int, tuple[int, int, int]]]]:
    """The target-only answers per prompt and the recorded matched (an interval where the gate derived one: its
    least and greatest) and offered counts per width and prompt."""
    answers: dict[int, list[int]] = {}
    counters: dict[int, dict[int, tuple[int, int, int]]] = {}
    with tarfile.open(bundle) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if len(parts) == 4 and parts[1:3] == ["requests", "target-only"] and parts[3].endswith("-r1.response.json"):
                doc: dict[str, Any] = json.load(tar.extractfile(member))  # type: ignore[arg-type]
                words = doc["choices"][0]["message"]["content"].split()
                answers[int(parts[3][1])] = [int(w[1:]) for w in words]
            elif len(parts) == 2 and parts[1] == "results.json":
                results: dict[str, Any] = json.load(tar.extractfile(member))  # type: ignore[arg-type]
                for w in results["widths"]:
                    counters[w["q"]] = {c["prompt_index"]: (c["matched_min"], c["matched_max"], c["offered"])
                                        for c in w["prompts"]}
    if not answers or not counters:
        raise SystemExit(f"{bundle}: expected a gate bundle with target-only responses and results.json")
    return answers, counters


def _cells(events: Iterable[Event]) -> str:
    listed = list(events)
    return " ".join(map(str, listed)) if listed else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundles", nargs="+")
    parser.add_argument("--design", default="FIFTH_LOUD_ALIGNED", help="the design the capture ran (BY_NAME)")
    args = parser.parse_args(argv)
    made = designs.BY_NAME[args.design]
    st = tiny_structure(1, Shape(sliding_window=made.sliding_window), made.near_ties)
    guess = {t: st.guess(t) for t in st.succ}
    read = {bundle: _members(bundle) for bundle in args.bundles}
    longest = {i: max((a[i] for a, _ in read.values()), key=len) for i in read[args.bundles[0]][0]}
    for bundle in args.bundles:
        answers, counters = read[bundle]
        n = len(answers[0])
        print(f"## {bundle}: {n} tokens, design {args.design}")
        print("| q | prompt | schedule's matched/offered (recorded) | n-comp | compressor-last | raw-ring-last |")
        print("| --- | --- | --- | --- | --- | --- |")
        for q in sorted(counters):
            for index, answer in sorted(answers.items()):
                run = schedule(answer, guess, q, longest.get(index))
                low, high, offered = counters[q][index]
                recorded = f"{low}/{offered}" if low == high else f"{low}..{high}/{offered}"
                # with no longer capture, the last step's drafts past the answer's end are unknown: up to q - 1 fewer
                slack = q - 1 if len(longest.get(index, answer)) <= len(answer) else 0
                if not (low - slack <= run.matched <= high and run.offered == offered):
                    raise SystemExit(f"{bundle}: q={q} prompt {index}: the schedule gives {run.matched}/{run.offered}, "
                                     f"the gate recorded {recorded}: not the draft this script assumes")
                p = made.prompt_bytes[index] + CHAT_TEMPLATE_TOKENS
                clean = events_over(run, answer, p, st, made.sliding_window, "")
                if any(clean.values()):
                    raise SystemExit(f"{bundle}: q={q} prompt {index}: the unchanged build shows an event: {clean}")
                cells = [_cells(events_over(run, answer, p, st, made.sliding_window, k)[k])
                         for k in ("n-comp", "compressor-last", "raw-ring-last")]
                print(f"| {q} | {index} (P={p}) | {run.matched}/{run.offered} ({recorded}) | "
                      f"{' | '.join(cells)} |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
