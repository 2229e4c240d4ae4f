#!/usr/bin/env python3
"""The real-engine mutant catalogue's CPU mirror: each mutant in the tiny models' double, in process, no gate.

    .venv/bin/python bench/mirror_mutants.py [--design NAME]

Writes the shipped tiny models (``ds4ci tiny-models``, seed 1; ``--design``: another design of
``ds4ci.tinymodels.design.BY_NAME``, at its own answer length) into a temporary folder and runs the
reference-exact loop (``ds4ci.refserver.decoding``) on both prompts at q=2, 3, 4 with each engine
mutant of ``ds4ci.refserver.faults`` (``DS4REF_FAULT``'s names, the catalogue's) and without; prints
one row per mutant: the first position (from 0) where the answer differs from target-only's, per
width and prompt ("-": the same answer; the catalogue's ``equivalent_at`` widths are named after the
mutant). The unfaulted row gives matched/offered drafts instead.
tests/unit/refserver/test_engine_mutants.py holds the same table's caught widths.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import tomllib

from ds4ci.refserver.decoding import Output, Penalties, decode_plain, decode_speculative
from ds4ci.refserver.faults import ENGINE_MUTANTS, EQUIVALENT, FaultPlan, FaultState
from ds4ci.refserver.modelfile import file_sha256
from ds4ci.refserver.tinydouble import TinyDraft, TinyTarget, chat_tokens, tiny_piece
from ds4ci.tinymodels import design
from ds4ci.tinymodels.bundle import write_tiny_set

CATALOGUE = Path(__file__).resolve().parents[1] / "ds4ci" / "mutants" / "lucebox-ds4-reference-exact.toml"


def _label(name: str | None, equivalent_at: dict[str, list[int]]) -> str:
    if name is None:
        return "(none)"
    if name in EQUIVALENT:
        return f"{name} (equivalent)"
    widths = equivalent_at.get(name)
    return f"{name} (equivalent at {', '.join(f'q={q}' for q in widths)})" if widths else name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--design", default=None, help="a name of ds4ci.tinymodels.design.BY_NAME (default: SHIPPED)")
    args = parser.parse_args(argv)
    if args.design is not None and args.design not in design.BY_NAME:
        parser.error(f"--design must be one of {', '.join(design.BY_NAME)}, got {args.design!r}")
    chosen = design.SHIPPED if args.design is None else design.BY_NAME[args.design]
    started = time.monotonic()
    catalogue = tomllib.loads(CATALOGUE.read_text(encoding="utf-8"))["mutant"]
    equivalent_at = {m["name"]: m["equivalent_at"] for m in catalogue if "equivalent_at" in m}
    with tempfile.TemporaryDirectory(prefix="ds4ci-mirror-") as folder:
        tiny = write_tiny_set(Path(folder), seed=1, design=chosen)
        target = TinyTarget(tiny.target, file_sha256(tiny.target))
        draft = TinyDraft(tiny.draft, target)
        n = chosen.max_tokens
        runs = []
        for path in tiny.prompts:
            prompt = chat_tokens([("user", path.read_text(encoding="utf-8"))])
            plain = Output(n, (), tiny_piece)
            decode_plain(target, prompt, plain, 512, Penalties())
            runs.append((prompt, plain.ids))
        print("| mutant | q=2 | q=3 | q=4 |\n| --- | --- | --- | --- |")
        for name in (None, *ENGINE_MUTANTS):
            cells = []
            for q in (2, 3, 4):
                shown = []
                for prompt, plain in runs:
                    state = FaultState(FaultPlan(name, 0, None), 0, 0) if name else None
                    out = Output(n, (), tiny_piece)
                    counters = decode_speculative(target, draft, prompt, out, 512, q, True, state)
                    at = next((i for i, (a, b) in enumerate(zip(plain, out.ids, strict=True)) if a != b), None)
                    if name is None:
                        shown.append(f"{'same' if at is None else f'DIFFERS at {at}'} {counters.matched}/{counters.offered}")
                    else:
                        shown.append("-" if at is None else str(at))
                cells.append(", ".join(shown))
            print(f"| {_label(name, equivalent_at)} | {' | '.join(cells)} |", flush=True)
    print(f"\n{time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
