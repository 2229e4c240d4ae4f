#!/usr/bin/env python3
"""Candidate designs of the successor tiny models, for measuring against real builds with planted faults.

    python bench/tiny_designs.py DIR [--only NAME,...] [--seed 1]

writes one `ds4ci tiny-models` set per candidate into DIR/NAME (target, draft, prompts, a pinned
ds4ci.toml) and prints each target's SHA-256. bench/real_mutants.py then runs the gate with each
(``--models DIR/NAME``, repeatable). A candidate differs from the shipped design
(``ds4ci.tinymodels.design.SHIPPED``) in the levers the sensitivity depends on: the sliding window
(how many raw rows one stale row shares the attention with), the layers' output projections (how much
the layers move a near-tie), how many known words are near-ties, and the answer's length.
docs/benchmarks.md ("Real-engine mutants") has what each one caught on the H200.

The gate reads token IDs from an answer only for targets it knows (``ds4ci.judging.tinywords``): a
candidate that is not the shipped design must be added there for a measurement run.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import replace
from pathlib import Path

from ds4ci.tinymodels import design
from ds4ci.tinymodels.bundle import write_tiny_set
from ds4ci.tinymodels.structure import NEAR_TIES

BASE = design.THIRD
CANDIDATES: dict[str, design.Design] = {
    "third": BASE,
    "w16": replace(BASE, sliding_window=16),
    "w16-s015": replace(BASE, sliding_window=16, layer_out_std=0.015),
    "w16-s015-k2": replace(BASE, sliding_window=16, layer_out_std=0.015, near_ties=replace(NEAR_TIES, every=2)),
    "w32-s015": replace(BASE, sliding_window=32, layer_out_std=0.015),
    "w128-s015": replace(BASE, layer_out_std=0.015),
    "w16-s04": replace(BASE, sliding_window=16, layer_out_std=0.04),
    "w16-s015-t160": replace(BASE, sliding_window=16, layer_out_std=0.015, max_tokens=160),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--only", default="", help="comma-separated candidate names (default: all)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    names = [n for n in a.only.split(",") if n] or list(CANDIDATES)
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        p.error(f"no candidate named {', '.join(unknown)}; known: {', '.join(CANDIDATES)}")
    for name in names:
        made = write_tiny_set(a.folder / name, a.seed, design=CANDIDATES[name])
        print(f"{name}\t{hashlib.sha256(made.target.read_bytes()).hexdigest()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
