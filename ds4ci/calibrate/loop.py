"""The mutation loop ``ds4ci calibrate`` and ``bench/real_mutants.py`` share: build the unchanged source, then
each mutant in turn (applied, rebuilt, put back), handing every binary kept to a callback.

Every substitution is checked before any file is touched, the source must be unmodified (git status) and
no earlier run's change may be in flight; SIGINT and SIGTERM put the applied file back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ds4ci.calibrate.build import BuildFailed, BuildPlan, build, keep_binary
from ds4ci.calibrate.catalogue import CONTROL, Mutant, check_applies
from ds4ci.calibrate.workspace import Workspace, restoring_on_signals

# name, its kept binary, its build record -> False to stop (the unchanged build did not pass: nothing else counts)
OnBuilt = Callable[[str, Path, dict[str, Any]], bool]
BUILDS = "builds.json"


def check_ready(source: Path, out: Path, chosen: Sequence[Mutant]) -> None:
    """Before anything is touched: no change in flight or by anyone else, and every substitution applies."""
    Workspace(source, out).check_clean()
    check_applies(source, list(chosen))


def build_order(chosen: Sequence[Mutant]) -> list[Mutant]:
    """The mutants grouped by the file they change (files in order of first appearance, mutants in their order
    within a file). Each build recompiles the file the mutant changes and the one the previous mutant changed
    (put back): grouped, a build after a mutant of the same file recompiles only that file, so a catalogue that
    alternates between a large and a small file builds its large file once per mutant of it, not once more per
    switch. The record lists the mutants in the catalogue's order whatever the build order."""
    files = list(dict.fromkeys(m.file for m in chosen))
    return sorted(chosen, key=lambda m: files.index(m.file))


def build_each(plan: BuildPlan, source: Path, out: Path, chosen: Sequence[Mutant], on_built: OnBuilt,
               say: Callable[[str], None], final_rebuild: bool = True) -> dict[str, dict[str, Any]]:
    """Build the control and each mutant; the build records by name (``build_s`` and ``sha256``, or ``error``)."""
    check_ready(source, out, chosen)
    ws = Workspace(source, out)
    bins, log = out / "bin", out / "build.log"
    records: dict[str, dict[str, Any]] = {}

    def keep(name: str, seconds: float) -> bool:
        dest = bins / name / (plan.binary.name if plan.binary is not None else plan.target)
        records[name] = {"build_s": round(seconds, 1), "sha256": keep_binary(plan, dest)}
        say(f"built {name}: {seconds:.1f} s, sha256 {records[name]['sha256'][:16]}…")
        return on_built(name, dest, records[name])

    with restoring_on_signals(ws, say):
        try:
            if keep(CONTROL, build(plan, log)):
                for m in build_order(chosen):
                    ws.apply(m)
                    try:
                        seconds = build(plan, log)
                    except BuildFailed as exc:  # a mutant that does not compile is reported; the others still run
                        records[m.name] = {"error": str(exc)}
                        say(f"NOT BUILT {m.name}: {exc}")
                        continue
                    finally:
                        ws.restore()
                    keep(m.name, seconds)
        finally:
            ws.restore()  # whatever stopped the loop, the source goes back first
        if final_rebuild and len(records) > 1:
            build(plan, log)  # leave the build folder as the unchanged source builds it
    bins.mkdir(parents=True, exist_ok=True)
    (bins / BUILDS).write_text(json.dumps(records, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return records
