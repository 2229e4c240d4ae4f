#!/usr/bin/env python3
"""Planted faults in a real engine build, and whether the gate catches them: the measure of the gate's
proof on real kernels (docs/benchmarks.md, "Real-engine mutants").

    python bench/real_mutants.py --build BUILD --models MODELS --runner h200 --out OUT

BUILD is a build folder of the engine that you configured yourself (docs/real-server.md says which
options the H200 builds used); its CMakeCache.txt names the source folder, and the catalogue's paths
are relative to it. The bench only runs ``cmake --build BUILD --target dflash_server``. MODELS is a
folder written by ``ds4ci tiny-models`` (its ds4ci.toml pins everything; ``--models`` may be given
several times to compare model sets side by side).

Steps, every one failing closed:
1. the catalogue (``bench/mutants/*.toml``) is read and checked: unique names, and every
   substitution's ``old`` text found exactly once in the source, before any file is touched;
2. the unchanged source is built: the control binary;
3. for each mutant: its substitutions are applied, the build is rerun (incremental: only the changed
   file recompiles), the binary is copied out, and the file is put back byte for byte (also on
   Ctrl-C or SIGTERM; OUT/applied.json records a change in flight, and ``--restore`` puts it back
   after a crash);
4. ``ds4ci gate --config MODELS/ds4ci.toml --server-bin BINARY`` for the control and each mutant
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
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
CATALOGUE_DIR = HERE / "mutants"
CONTROL = "control"
DEFAULT_TARGET = "dflash_server"
GATE_TIMEOUT_S = 1800.0


class BenchError(Exception):
    """A refusal: the message says what was expected and what was found."""


@dataclass(frozen=True)
class Substitution:
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    name: str
    summary: str
    file: str
    substitutions: tuple[Substitution, ...]
    equivalent: str  # why it cannot change an answer ("" where it can)
    equivalent_at: tuple[int, ...]  # widths where it cannot (all widths when equivalent and this is empty)


@dataclass(frozen=True)
class Catalogue:
    path: Path
    engine: str
    repository: str
    commits: tuple[str, ...]
    written: str
    mutants: tuple[Mutant, ...]


def _text(table: dict[str, Any], key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise BenchError(f"{where}: expected a non-empty string `{key}`, found {value!r}")
    return value


def load_catalogue(path: Path) -> Catalogue:
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BenchError(f"{path}: not a readable TOML catalogue ({exc})") from None
    commits = doc.get("commits")
    if not isinstance(commits, list) or not commits or not all(isinstance(c, str) and len(c) == 40 for c in commits):
        raise BenchError(f"{path}: expected `commits`, a list of full 40-hex engine commits, found {commits!r}")
    mutants: list[Mutant] = []
    for i, raw in enumerate(doc.get("mutant") or []):
        where = f"{path} mutant {i + 1}"
        name = _text(raw, "name", where)
        subs = raw.get("substitutions")
        if not isinstance(subs, list) or not subs:
            raise BenchError(f"{where} ({name}): expected a non-empty list `substitutions`")
        parsed = tuple(Substitution(_text(s, "old", where), str(s.get("new", ""))) for s in subs)
        if any(s.old == s.new for s in parsed):
            raise BenchError(f"{where} ({name}): a substitution whose new text equals its old text changes nothing")
        at = raw.get("equivalent_at", [])
        if not isinstance(at, list) or not all(isinstance(q, int) for q in at):
            raise BenchError(f"{where} ({name}): `equivalent_at` must list widths, found {at!r}")
        equivalent = str(raw.get("equivalent", ""))
        if at and not equivalent:
            raise BenchError(f"{where} ({name}): `equivalent_at` needs the reason in `equivalent`")
        mutants.append(Mutant(name, _text(raw, "summary", where), _text(raw, "file", where), parsed, equivalent,
                              tuple(at)))
    names = [m.name for m in mutants]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes or not mutants:
        found = f"duplicates {', '.join(dupes)}" if dupes else "none"
        raise BenchError(f"{path}: expected mutants with unique names, found {found}")
    if CONTROL in names:
        raise BenchError(f"{path}: `{CONTROL}` names the unchanged build and cannot name a mutant")
    return Catalogue(path, _text(doc, "engine", str(path)), _text(doc, "repository", str(path)), tuple(commits),
                     _text(doc, "written", str(path)), tuple(mutants))


def mutate(text: str, mutant: Mutant) -> str:
    """The file's text with every substitution applied; each ``old`` must occur exactly once."""
    for sub in mutant.substitutions:
        count = text.count(sub.old)
        if count != 1:
            raise BenchError(f"mutant {mutant.name}: expected {sub.old!r} exactly once in {mutant.file}, found it {count} times "
                             "(the catalogue was written for another engine commit?)")
        text = text.replace(sub.old, sub.new)
    return text


def source_dir(build: Path, given: Path | None) -> Path:
    cache = build / "CMakeCache.txt"
    try:
        lines = cache.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise BenchError(f"{build}: expected a configured CMake build folder with CMakeCache.txt ({exc})") from None
    home = [ln.split("=", 1)[1] for ln in lines if ln.startswith("CMAKE_HOME_DIRECTORY:")]
    if len(home) != 1:
        raise BenchError(f"{cache}: expected one CMAKE_HOME_DIRECTORY entry, found {len(home)}")
    found = Path(home[0]).resolve()
    if given is not None and given.resolve() != found:
        raise BenchError(f"--source {given} is not the source folder the build was configured from ({found})")
    return found


class Workspace:
    """Applies one mutant at a time to the source and always puts the original bytes back."""

    def __init__(self, source: Path, out: Path) -> None:
        self.source = source
        self.state = out / "applied.json"
        self.originals = out / "originals"

    def check_clean(self) -> None:
        if self.state.exists():
            raise BenchError(f"{self.state} says a mutant is still applied to {self.source} (an earlier run was killed): "
                             "run again with --restore to put the original file back")

    def apply(self, mutant: Mutant) -> None:
        path = self.source / mutant.file
        original = path.read_bytes()
        changed = mutate(original.decode("utf-8"), mutant).encode("utf-8")
        keep = self.originals / mutant.file
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_bytes(original)
        self.state.write_text(json.dumps({"mutant": mutant.name, "file": mutant.file,
                                          "sha256": hashlib.sha256(original).hexdigest()}) + "\n")
        path.write_bytes(changed)

    def restore(self) -> str | None:
        """Put back the file a recorded mutant changed; returns its name (None: nothing was applied)."""
        if not self.state.exists():
            return None
        record = json.loads(self.state.read_text())
        keep = self.originals / record["file"]
        data = keep.read_bytes()
        if hashlib.sha256(data).hexdigest() != record["sha256"]:
            raise BenchError(f"{keep}: the kept original does not match its recorded SHA-256; restore {record['file']} by hand")
        (self.source / record["file"]).write_bytes(data)
        self.state.unlink()
        return str(record["mutant"])


def build(build_dir: Path, target: str, log: Path) -> float:
    t0 = time.perf_counter()
    with log.open("ab") as fh:
        proc = subprocess.run(["cmake", "--build", str(build_dir), "--target", target], stdout=fh, stderr=subprocess.STDOUT,
                              check=False)
    if proc.returncode != 0:
        raise BenchError(f"cmake --build {build_dir} --target {target} exited {proc.returncode}; see {log}")
    return time.perf_counter() - t0


def built_binary(build_dir: Path, target: str) -> Path:
    found = [p for p in (build_dir / target, build_dir / "bin" / target) if p.is_file() and os.access(p, os.X_OK)]
    if len(found) != 1:
        raise BenchError(f"expected one executable {target} in {build_dir} or {build_dir}/bin, found {len(found)}")
    return found[0]


def build_all(args: argparse.Namespace, chosen: list[Mutant],
              on_built: Callable[[str, Path], None]) -> dict[str, dict[str, Any]]:
    """Builds the control and each mutant in turn; ``on_built`` gets each binary as soon as it is kept."""
    source = source_dir(args.build, args.source)
    for m in chosen:  # every substitution is checked before any file is touched
        mutate((source / m.file).read_text(encoding="utf-8"), m)
    ws = Workspace(source, args.out)
    ws.check_clean()
    bins = args.out / "bin"
    log = args.out / "build.log"
    records: dict[str, dict[str, Any]] = {}

    def keep(name: str, seconds: float) -> None:
        dest = bins / name / args.target
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = dest.with_name(dest.name + ".partial")
        shutil.copy2(built_binary(args.build, args.target), partial)
        partial.rename(dest)  # a gate started on this binary never sees half a copy
        records[name] = {"build_s": round(seconds, 1), "sha256": hashlib.sha256(dest.read_bytes()).hexdigest()}
        print(f"[real_mutants] built {name}: {seconds:.1f} s, sha256 {records[name]['sha256'][:16]}…", flush=True)
        on_built(name, dest)

    def on_signal(signum: int, _frame: Any) -> None:
        restored = ws.restore()
        done = f"restored the file {restored} changed" if restored else "nothing was applied"
        raise SystemExit(f"[real_mutants] signal {signum}: {done}")

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        keep(CONTROL, build(args.build, args.target, log))
        for m in chosen:
            ws.apply(m)
            try:
                seconds = build(args.build, args.target, log)
            except BenchError as exc:  # a mutant that does not compile is reported, and the others still run
                records[m.name] = {"error": str(exc)}
                print(f"[real_mutants] NOT BUILT {m.name}: {exc}", flush=True)
                continue
            finally:
                ws.restore()
            keep(m.name, seconds)
        if not args.no_final_rebuild:
            build(args.build, args.target, log)  # leave the build folder as the unchanged source builds it
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    (bins / "builds.json").write_text(json.dumps(records, indent=2, sort_keys=True) + "\n")
    return records


def gate(binary: Path, models: Path, runner: str, work: Path, extra: list[str]) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=False)  # never over earlier evidence
    results = work / "results.json"
    cmd = [sys.executable, "-m", "ds4ci", "gate", "--config", str(models / "ds4ci.toml"), "--server-bin", str(binary),
           "--runner", runner, "--evidence-dir", str(work / "evidence"), "--results-out", str(results), *extra]
    t0 = time.perf_counter()
    with (work / "gate.log").open("wb") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False, timeout=GATE_TIMEOUT_S, cwd=work)
    wall = time.perf_counter() - t0
    row: dict[str, Any] = {"exit_code": proc.returncode, "wall_s": round(wall, 1), "results": str(results)}
    try:
        doc = json.loads(results.read_text())
    except (OSError, ValueError) as exc:
        row.update(verdict="no results", error=f"{results}: {exc}")
        return row
    widths = {}
    for w in doc.get("widths", []):
        firsts = [p["mismatch"]["position"] for p in w.get("prompts", []) if isinstance(p.get("mismatch"), dict)]
        accepted = [f"{p['matched']}/{p['offered']}" for p in w.get("prompts", [])
                    if isinstance(p.get("matched"), int) and isinstance(p.get("offered"), int)]
        widths[str(w["q"])] = {"verdict": w["verdict"], "first_difference": min(firsts) if firsts else None,
                               "matched_offered": accepted, "reasons": w.get("reasons", [])[:2]}
    row.update(verdict=doc.get("verdict"), widths=widths, reasons=doc.get("reasons", [])[:3],
               gate_s=(doc.get("timings") or {}).get("total_s"))
    return row


def caught_widths(row: dict[str, Any]) -> list[int]:
    return sorted(int(q) for q, w in row.get("widths", {}).items() if w["verdict"] != "pass")


class GatePool:
    """Gates run ``jobs`` at a time, each started as soon as its binary exists (while the next one builds)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs)
        self.jobs: dict[tuple[str, str], concurrent.futures.Future[dict[str, Any]]] = {}

    def submit(self, name: str, binary: Path) -> None:
        for models in self.args.models:
            work = self.args.out / "gates" / models.name / name
            self.jobs[(models.name, name)] = self.pool.submit(gate, binary, models, self.args.runner, work,
                                                              self.args.gate_arg)

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
            print(f"[real_mutants] {'restored the file mutant ' + restored + ' changed' if restored else 'nothing to restore'}")
            return 0
        wanted = [n for n in args.only.split(",") if n]
        unknown = sorted(set(wanted) - {m.name for m in cat.mutants})
        if unknown:
            raise BenchError(f"--only: no mutant named {', '.join(unknown)} in {cat.path}")
        chosen = [m for m in cat.mutants if not wanted or m.name in wanted]
        if args.binaries is None and args.build is None:
            raise BenchError("give --build (to build) or --binaries (binaries built earlier)")
        if not args.build_only and not args.models:
            raise BenchError("give --models (a `ds4ci tiny-models` folder) to run the gates, or --build-only")
        for folder in args.models:
            if not (folder / "ds4ci.toml").is_file():
                raise BenchError(f"--models {folder}: expected a folder with the ds4ci.toml that `ds4ci tiny-models` writes")
        if args.jobs < 1:
            raise BenchError(f"--jobs must be at least 1, found {args.jobs}")
        args.out.mkdir(parents=True, exist_ok=True)
        started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        builds: dict[str, Any] = {}
        pool = GatePool(args)
        if args.binaries is None:
            builds = build_all(args, chosen, (lambda _n, _b: None) if args.build_only else pool.submit)
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
