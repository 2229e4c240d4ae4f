#!/usr/bin/env python3
"""How the tiny models' sensitivity to the planted faults depends on the layers' share of the logits.

    .venv/bin/python bench/sensitivity_gain.py --gains 80,320,1280 --json-out /tmp/gain.json

In process, no gate: the tiny-model double (``ds4ci.refserver.tinydouble``) with its context term (the
stand-in for the layers) scaled by each gain, the reference-exact loop with one planted fault
(``ds4ci.refserver.faults``; seeds 1..--trials, q=2,3,4, both shipped prompts) and without; it counts
the requests where the fault fired and where the answer differs from greedy (what the gate's token
comparison catches) and, per fault, the trials (fault seeds) with any request changed: what one gate run
catches. Gain 80 is the double's own (docs/selftest.md). ``--model-seeds`` writes the models of other
``tiny-models --seed`` values (the shipped config uses 1).

``--near-tie-gap``, ``--near-tie-every``, ``--near-tie-unknown-every`` and ``--near-ties-in-first-block``
write the successor models with other near-ties than the shipped ones
(``ds4ci.tinymodels.structure.NearTies``: the runner-up that many logits behind the successor, at about
one word the draft knows in ``every``, one it does not know in ``unknown-every``, and whether the first
block of runs has any) to measure a design before it ships. The defaults are the shipped values;
``--near-tie-every 6 --near-tie-unknown-every 6 --near-ties-in-first-block`` writes the second
successor set, and ``--near-tie-gap 1 --near-tie-every 16 --near-tie-unknown-every 16
--near-ties-in-first-block`` the first.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine

from ds4ci.refserver import tinydouble
from ds4ci.refserver.decoding import Output, Penalties, decode_plain, decode_speculative
from ds4ci.refserver.faults import SEEDED, FaultPlan
from ds4ci.refserver.modelfile import file_sha256
from ds4ci.tinymodels import design, structure
from ds4ci.tinymodels.bundle import write_tiny_set

N_TOKENS = 96


def measure(kind: str, gain: float, trials: int, folder: Path,
            near_ties: structure.NearTies = structure.NEAR_TIES, model_seed: int = 1) -> dict[str, Any]:
    tiny = write_tiny_set(folder / f"{kind}-{model_seed}", seed=model_seed, kind=kind,
                          design=replace(design.SHIPPED, near_ties=near_ties))
    tinydouble.CONTEXT_GAIN = gain
    target = tinydouble.TinyTarget(tiny.target, file_sha256(tiny.target))
    draft = tinydouble.TinyDraft(tiny.draft, target)
    counts = {f: {"requests": 0, "fired": 0, "changed": 0} for f in SEEDED}
    caught: dict[str, set[int]] = {f: set() for f in SEEDED}  # fault seeds with a changed answer: a gate catch
    for prompt_file in tiny.prompts:
        prompt = tinydouble.chat_tokens([("user", prompt_file.read_text(encoding="utf-8"))])
        greedy = Output(N_TOKENS, (), tinydouble.tiny_piece)
        decode_plain(target, prompt, greedy, 512, Penalties())
        for fault in SEEDED:
            for q in (2, 3, 4):
                for seed in range(1, trials + 1):
                    state = FaultPlan(fault, seed, None).arm(prompt, 0)
                    out = Output(N_TOKENS, (), tinydouble.tiny_piece)
                    decode_speculative(target, draft, prompt, out, 512, q, True, state)
                    changed = out.ids != greedy.ids
                    c = counts[fault]
                    c["requests"] += 1
                    c["fired"] += state.fired_at is not None
                    c["changed"] += changed
                    if changed:
                        caught[fault].add(seed)
    for fault, seeds in caught.items():
        counts[fault]["trials_caught"] = len(seeds)
    return {"kind": kind, "model_seed": model_seed, "gain": gain, "near_tie_gap": near_ties.gap,
            "near_tie_every": near_ties.every, "near_tie_unknown_every": near_ties.unknown_every,
            "near_ties_in_first_block": near_ties.in_first_block,
            "context_logits": round(target.arch.context_logits, 3), "faults": counts}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gains", default="80,320,1280", help="comma-separated context gains (default 80,320,1280)")
    p.add_argument("--kinds", default="successor,random", help="tiny-model kinds (default successor,random)")
    p.add_argument("--trials", type=int, default=8, help="seeds per fault, width and prompt (default 8)")
    p.add_argument("--model-seeds", default="1", help="comma-separated `tiny-models --seed` values (default 1, shipped)")
    shipped = structure.NEAR_TIES
    p.add_argument("--near-tie-gap", type=float, default=shipped.gap,
                   help=f"logits between a near-tie's successor and runner-up (shipped: {shipped.gap:g})")
    p.add_argument("--near-tie-every", type=int, default=shipped.every,
                   help=f"about one word the draft knows in this many is a near-tie (shipped: {shipped.every})")
    p.add_argument("--near-tie-unknown-every", type=int, default=shipped.unknown_every,
                   help=f"about one word the draft does not know in this many (shipped: {shipped.unknown_every})")
    p.add_argument("--near-ties-in-first-block", action=argparse.BooleanOptionalAction,
                   default=shipped.in_first_block,
                   help=f"near-ties in the first block of runs too (shipped: {shipped.in_first_block})")
    p.add_argument("--json-out", type=Path, help="also write the figures here as JSON")
    a = p.parse_args()
    if min(a.near_tie_every, a.near_tie_unknown_every) < 1 or not 0.0 <= a.near_tie_gap < structure.ALPHA - structure.BETA:
        p.error("--near-tie-every and --near-tie-unknown-every must be at least 1 and --near-tie-gap in "
                f"0..{structure.ALPHA - structure.BETA:g}")
    near_ties = structure.NearTies(a.near_tie_gap, a.near_tie_every, a.near_tie_unknown_every,
                                   a.near_ties_in_first_block)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model_seed, kind, gain in ((int(m), k, float(g)) for m in a.model_seeds.split(",")
                                       for k in a.kinds.split(",") for g in a.gains.split(",")):
            row = measure(kind, gain, a.trials, Path(tmp), near_ties, model_seed)
            rows.append(row)
            shown = ", ".join(f"{f} fired {c['fired']}/{c['requests']} changed {c['changed']} "
                              f"(trials caught {c['trials_caught']}/{a.trials})" for f, c in row["faults"].items())
            ties = (f"near-tie gap {a.near_tie_gap:g} every {a.near_tie_every} (unknown words "
                    f"{a.near_tie_unknown_every}, first block {'yes' if a.near_ties_in_first_block else 'no'})")
            print(f"{kind} seed {model_seed} gain {gain:g} {ties} (context {row['context_logits']} logits): {shown}",
                  flush=True)
    if a.json_out:
        a.json_out.write_text(json.dumps({"machine": machine(), "command": shlex.join(sys.argv), "rows": rows},
                                         indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
