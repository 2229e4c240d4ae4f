#!/usr/bin/env python3
"""Planted faults in a real engine build, and whether the gate catches them: the measure of the gate's
proof on real kernels (docs/benchmarks.md, "Real-engine mutants").

    python bench/real_mutants.py --build BUILD --models MODELS --runner h200 --out OUT

BUILD is a build folder of the engine that you configured yourself (docs/real-server.md says which
options the H200 builds used); its CMakeCache.txt names the source folder, and the catalogue's paths
are relative to it. The bench only runs ``cmake --build BUILD --target dflash_server``. MODELS is a
folder written by ``ds4ci tiny-models`` (its ds4ci.toml pins everything; ``--models`` may be given
several times to compare model sets side by side).

Steps 1 to 3 are ds4ci.calibrate's (the library ``ds4ci calibrate`` runs on one runner with one model set,
docs/calibration.md, and seals as a signed record); this bench adds model sets side by side, gates in
parallel with the builds, and prebuilt binaries. Steps, every one failing closed:
1. the catalogue (``ds4ci/mutants/*.toml``) is read and checked: unique names, and every
   substitution's ``old`` text found exactly once in the source, which must be unmodified (git status),
   before any file is touched;
2. the unchanged source is built: the control binary;
3. for each mutant: its substitutions are applied, the build is rerun (incremental: only the changed
   file recompiles), the binary is copied out, and the file is put back byte for byte (also on
   Ctrl-C or SIGTERM; OUT/applied.json records a change in flight, and ``--restore`` puts it back
   after a crash);
4. ``python -m ds4ci gate --config MODELS/ds4ci.toml --server-bin BINARY`` (this interpreter: no ``ds4ci``
   script is needed beside it) for the control and each mutant
   (``--jobs`` gates at a time), each with its own evidence folder under OUT;
5. one row per mutant: caught at which widths (a width is caught when its verdict is not pass), the
   first differing position, the gate's time. The control must pass, or no row means anything.

``--build-only`` stops after step 3 (binaries in OUT/bin/); ``--binaries DIR`` starts at step 4 with
binaries built earlier (the same layout), e.g. on a GPU machine that did not compile them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

from ds4ci.calibrate.build import DEFAULT_TARGET, cmake_plan, require_models
from ds4ci.calibrate.catalogue import CONTROL, Mutant, Substitution, choose, default_folder, load_catalogue, mutate
from ds4ci.calibrate.cpusets import LEVERS, NONE, Slots
from ds4ci.calibrate.gates import run_gate
from ds4ci.calibrate.loop import build_each
from ds4ci.calibrate.workspace import Workspace, source_dir
from ds4ci.errors import Ds4ciError

# The library (ds4ci.calibrate, which `ds4ci calibrate` runs) does the work; this bench adds side-by-side model
# sets, gates in parallel with the builds, and prebuilt binaries. Names kept for the bench's own tests.
BenchError = Ds4ciError
CATALOGUE_DIR = default_folder()
__all__ = ["CATALOGUE_DIR", "CONTROL", "BenchError", "Mutant", "Substitution", "Workspace", "load_catalogue", "mutate",
           "source_dir"]


def say(text: str) -> None:
    print(f"[real_mutants] {text}", flush=True)


def build_all(args: argparse.Namespace, chosen: list[Mutant], pool: GatePool | None) -> dict[str, dict[str, Any]]:
    """Builds the control and each mutant in turn (ds4ci.calibrate.loop); each binary goes to the pool when kept."""
    def on_built(name: str, binary: Path, _record: dict[str, Any]) -> bool:
        if pool is not None:
            pool.submit(name, binary)
        return True

    return build_each(cmake_plan(args.build.resolve(), args.target), source_dir(args.build, args.source), args.out,
                      chosen, on_built, say, final_rebuild=not args.no_final_rebuild)


def caught_widths(row: dict[str, Any]) -> list[int]:
    return sorted(int(q) for q, w in row.get("widths", {}).items() if w["verdict"] != "pass")


class GatePool:
    """Gates run ``jobs`` at a time, each started as soon as its binary exists (while the next one builds)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs)
        self.jobs: dict[tuple[str, str], concurrent.futures.Future[dict[str, Any]]] = {}
        self.slots = Slots(args.cpu_sets, args.jobs)  # one disjoint CPU set per gate running (--cpu-sets)

    def _gate(self, binary: Path, config: Path, work: Path) -> dict[str, Any]:
        with self.slots.take() as cpus:
            row = run_gate(binary, config, self.args.runner, work, [*self.args.gate_arg, *self.slots.gate_args()],
                           cpus=cpus)
        return {**row, **self.slots.describe(cpus)}

    def submit(self, name: str, binary: Path) -> None:
        for models in self.args.models:
            work = self.args.out / "gates" / models.name / name
            self.jobs[(models.name, name)] = self.pool.submit(self._gate, binary, models / "ds4ci.toml", work)

    def rows(self) -> dict[str, Any]:
        try:
            return {f"{m}/{n}": fut.result() for (m, n), fut in self.jobs.items()}
        finally:
            self.pool.shutdown(wait=True)


def run_all(args: argparse.Namespace, chosen: list[Mutant], bins: Path, pool: GatePool) -> dict[str, Any]:
    names = [CONTROL, *[m.name for m in chosen]]
    missing = [n for n in names if not (bins / n / args.target).is_file()]
    if missing:
        raise BenchError(f"{bins}: expected a binary {args.target} for {', '.join(missing)} (build them first)")
    for name in names:
        pool.submit(name, bins / name / args.target)
    return pool.rows()


def equivalence(m: Mutant) -> str:
    if m.equivalent_at:
        return f"at q={','.join(map(str, m.equivalent_at))}"
    return "yes" if m.equivalent else "no"


def table(chosen: list[Mutant], rows: dict[str, Any], models: list[Path]) -> list[str]:
    lines = []
    for folder in models:
        lines += [f"models {folder.name}:",
                  "| mutant | equivalent | caught at | first difference | matched/offered q=2; 3; 4 | verdict | gate |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for name, mutant in [(CONTROL, None), *[(m.name, m) for m in chosen]]:
            row = rows.get(f"{folder.name}/{name}", {"verdict": "not built"})
            caught = caught_widths(row)
            firsts = [w["first_difference"] for w in row.get("widths", {}).values() if w["first_difference"] is not None]
            eq = "" if mutant is None else equivalence(mutant)
            if mutant is None:
                at = "control: " + ("pass" if row.get("verdict") == "pass" else "NOT PASS")
            elif not row.get("widths"):
                at = f"no verdict per width ({row.get('verdict')})"
            else:
                at = ",".join(f"q={q}" for q in caught) or "none"
            gate_s = row.get("gate_s")
            accepted = "; ".join(",".join(w.get("matched_offered", [])) or "-" for _q, w in sorted(row.get("widths", {}).items()))
            first = min(firsts) if firsts else "-"
            lines.append(f"| {name} | {eq} | {at} | {first} | {accepted or '-'} | {row.get('verdict')} | "
                         f"{gate_s if gate_s is not None else row.get('wall_s')} s |")
    return lines


def check_args(args: argparse.Namespace) -> None:
    if args.binaries is None and args.build is None:
        raise BenchError("give --build (to build) or --binaries (binaries built earlier)")
    if not args.build_only and not args.models:
        raise BenchError("give --models (a `ds4ci tiny-models` folder) to run the gates, or --build-only")
    for folder in args.models:
        require_models(folder)
    if args.jobs < 1:
        raise BenchError(f"--jobs must be at least 1, found {args.jobs}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", type=Path, help="the engine's configured CMake build folder")
    p.add_argument("--source", type=Path, help="its source folder (default: from CMakeCache.txt; checked if given)")
    p.add_argument("--catalogue", type=Path, default=CATALOGUE_DIR / "lucebox-ds4-reference-exact.toml")
    p.add_argument("--target", default=DEFAULT_TARGET, help="the CMake target and binary name")
    p.add_argument("--models", type=Path, action="append", default=[], help="a `ds4ci tiny-models` folder (repeatable)")
    p.add_argument("--runner", default="local")
    p.add_argument("--only", default="", help="comma-separated mutant names (default: all)")
    p.add_argument("--jobs", type=int, default=1, help="gates at a time (the GPU is shared; default 1)")
    p.add_argument("--cpu-sets", default=NONE, choices=LEVERS,
                   help="gates side by side: none (every CPU), affinity (gate i of --jobs on the i-th disjoint CPU set), "
                   "affinity+online (also the set as the sandbox's /sys/devices/system/cpu/online); default none")
    p.add_argument("--gate-arg", action="append", default=[], help="one more argument for every `ds4ci gate`")
    p.add_argument("--out", type=Path, required=True, help="a new folder for binaries, evidence and the table")
    p.add_argument("--build-only", action="store_true", help="build the control and the mutants, run no gate")
    p.add_argument("--binaries", type=Path, help="binaries built earlier (OUT/bin of a --build-only run): no build")
    p.add_argument("--no-final-rebuild", action="store_true", help="leave the build folder as the last mutant built it")
    p.add_argument("--restore", action="store_true", help="put back a file an interrupted run left changed, then stop")
    p.add_argument("--json-out", type=Path)
    args = p.parse_args(argv)
    try:
        cat = load_catalogue(args.catalogue)
        if args.restore:
            if args.build is None:
                raise BenchError("--restore needs --build (the source folder comes from its CMakeCache.txt)")
            restored = Workspace(source_dir(args.build, args.source), args.out).restore()
            say(f"restored the file mutant {restored} changed" if restored else "nothing to restore")
            return 0
        chosen = choose(cat, args.only)
        check_args(args)
        args.out.mkdir(parents=True, exist_ok=True)
        started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        builds: dict[str, Any] = {}
        pool = GatePool(args)
        if args.binaries is None:
            builds = build_all(args, chosen, None if args.build_only else pool)
            if args.build_only:
                return 0
            rows = pool.rows()
        else:
            if (args.binaries / "builds.json").is_file():
                builds = json.loads((args.binaries / "builds.json").read_text())
            rows = run_all(args, chosen, args.binaries, pool)
    except BenchError as exc:
        print(f"[real_mutants] error: {exc}", file=sys.stderr)
        return 2
    lines = table(chosen, rows, args.models)
    print("\n".join(lines))
    controls_pass = all(rows[f"{m.name}/{CONTROL}"].get("verdict") == "pass" for m in args.models)
    doc = {"catalogue": str(cat.path), "engine": f"{cat.repository}", "commits": list(cat.commits), "started": started,
           "command": sys.argv, "builds": builds, "rows": rows, "table": lines, "controls_pass": controls_pass}
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    if not controls_pass:
        print("[real_mutants] error: a control (the unchanged build) did not pass: the rows above prove nothing", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
